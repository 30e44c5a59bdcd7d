"""The session both real-client capture tests play: a config unit test that fails on a fresh
checkout until fixtures.env exists (Claude Code writes it, Codex patches it in)."""

REMOTE = "git@github.com:acme/shop.git"
CHECK = "python3 -m unittest -q test_config"
TEST_FILE = """\
import unittest


class ConfigTest(unittest.TestCase):
    def test_fixture_env(self):
        with open("fixtures.env") as f:
            self.assertIn("FOO=1", f.read())
"""
