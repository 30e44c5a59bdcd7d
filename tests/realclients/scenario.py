"""The session the real-client capture tests play: a config unit test that fails on a fresh
checkout until fixtures.env exists (Claude Code writes it, Codex patches it in)."""

import subprocess
from pathlib import Path

REMOTE = "git@github.com:acme/shop.git"
CHECK = "python3 -m unittest -q test_config"
TEST_FILE = """\
import unittest


class ConfigTest(unittest.TestCase):
    def test_fixture_env(self):
        with open("fixtures.env") as f:
            self.assertIn("FOO=1", f.read())
"""
#: git as the project's committer, whatever the machine's git config says.
GIT_AS = "git -c user.name=ada -c user.email=ada@example.invalid"


def checkout(project: Path, *, commit: bool = False) -> None:
    """`project` as the session's checkout: a git repository with REMOTE as its origin and
    the config test (committed when `commit`: a client that wants a clean tree)."""
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=30)
    subprocess.run(["git", "-C", str(project), "remote", "add", "origin", REMOTE], check=True,
                   timeout=30)
    (project / "test_config.py").write_text(TEST_FILE)
    if commit:
        subprocess.run(f"git add test_config.py && {GIT_AS} commit -qm start", shell=True,
                       cwd=project, check=True, timeout=30)
