"""The secret rules as data: one table, read by the engine in redact.py. Stdlib only.

Each Rule is what gitleaks' config/gitleaks.toml calls a rule (an id, a description, a
pattern, keywords that must appear before the pattern is tried, an entropy floor), plus
the context it needs:

- "token": the shape alone is the proof (a vendor prefix such as ghp_ or AKIA);
- "label": a bare shape that only means "secret" next to a word naming its vendor or kind
  (a 40-character string after "cohere", a UUID after "heroku");
- "pair": a key id next to a high-entropy string, no labels (AKIA… beside its 40-character
  secret): both are removed;
- "block": a multi-line block (PEM, PGP, PuTTY) removed from its header to its end;
- "assignment": a value after a name that names a secret (env, shell, YAML, TOML, JSON,
  INI, code, headers, CLI flags), where the value is checked against the placeholder and
  reference shapes in redact.py (`$VAR`, `<…>`, `os.environ[…]`, `changeme`) first.

The part of a match that is removed is the named group `s` (and `s2` for pairs), else the
whole match, so a URL keeps its scheme and user, and a header keeps its name.

Keywords are lower-case substrings; a rule runs only when one of them is in the lower-cased
text, and the union of all keywords is the clean-text guard in front of the whole table
(tests/mcp_bridge/test_redact_rules.py checks that no rule matches without its keyword).
The patterns were written for this project after reading the gitleaks rule set; the
families chosen are the ones coding agents meet: cloud, VCS and registries, LLM providers,
the SaaS a web app talks to, private keys, and credentials in URLs, headers and commands.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

#: ctxlake's API tokens: this prefix and secrets.token_urlsafe(32) (fleet.tokens makes them).
API_TOKEN_PREFIX = "ctx_"

# What may stand around a bare token: not a token character (gitleaks' trailing
# `(?:[\x60'"\s;]|\\[nr]|$)`, loosened to any non-token character for prose).
_END = r"(?![A-Za-z0-9_-])"
# gitleaks' contextual shape: the vendor word, up to 20 name characters, an operator.
_ASSIGN_OP = r"[ \t\w.-]{0,30}[\s'\"]{0,3}(?:=|>|:{1,3}=|:|=>|,|\(|\s)[\s'\"`=]{0,5}"


class LazyPattern:
    """A regex compiled on first use. The table holds ~140 patterns and a hook process
    (interpreter start to exit in < 100 ms CPU) scrubs one short string: it should pay for
    the few rules whose keywords that string holds, not for compiling all of them."""

    __slots__ = ("_args", "_re", "__dict__")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._re: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._re is None:
            self._re = re.compile(*self._args)
        return self._re

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.compiled(), name)
        setattr(self, name, value)  # the next lookup is a plain attribute: no extra call
        return value


class Rule(NamedTuple):
    id: str
    description: str
    pattern: LazyPattern
    keywords: tuple[str, ...]
    context: str = "token"
    entropy: float = 0.0  # Shannon bits per character the secret must reach
    # The character before the match must not be a token character. Checked by the engine
    # rather than by a leading lookbehind, which would cost the regex its literal-prefix
    # scan (a pattern starting with "ghp_" is searched for like a substring).
    boundary: bool = False

    @property
    def needs_run(self) -> bool:
        """Whether every match holds a run of 15+ token characters (see redact._RUN)."""
        return self.context in ("token", "label", "pair")


def _r(id: str, description: str, pattern: str, keywords: tuple[str, ...] | str, *,
       context: str = "token", entropy: float = 0.0, flags: int = 0,
       boundary: bool = False) -> Rule:
    kws = (keywords,) if isinstance(keywords, str) else keywords
    return Rule(id, description, LazyPattern(pattern, flags), tuple(k.lower() for k in kws),
                context, entropy, boundary)


def _token(id: str, description: str, body: str, keywords: tuple[str, ...] | str,
           entropy: float = 0.0, flags: int = 0) -> Rule:
    return _r(id, description, body + _END, keywords, entropy=entropy, flags=flags,
              boundary=True)


def _labelled(id: str, description: str, words: str, secret: str,
              keywords: tuple[str, ...] | str, entropy: float = 0.0) -> Rule:
    """A vendor word (`words`, a regex alternation), then an operator, then the secret."""
    pattern = (rf"(?i:(?:{words}){_ASSIGN_OP})(?P<s>{secret}){_END}")
    return _r(id, description, pattern, keywords, context="label", entropy=entropy)


_HEX = "[a-f0-9]"
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_B64 = "[A-Za-z0-9+/]"

RULES: tuple[Rule, ...] = (
    # --- private keys and key files -------------------------------------------------
    _r("private-key", "PEM, OpenSSH, PGP or encrypted private key block, header to footer "
       "(or to the end of a cut-off paste)",
       r"-----BEGIN[ A-Z0-9_-]{0,40}PRIVATE KEY(?: BLOCK)?-----"
       r"(?=[\s\S]{0,300}?[A-Za-z0-9+/]{12})[\s\S]*?"
       r"(?:-----END[ A-Z0-9_-]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)",
       ("private key",), context="block"),
    _r("private-key", "PuTTY private key file (.ppk), header to Private-MAC",
       r"PuTTY-User-Key-File-\d:[\s\S]*?(?:Private-MAC:\s*[0-9a-fA-F]+|\Z)",
       "putty-user-key-file", context="block"),
    _token("private-key", "OpenSSH private key body without its header",
           r"b3BlbnNzaC1rZXktdjE[A-Za-z0-9+/=]{20,}", "b3blbnnzac1rzxktdje"),
    _token("private-key", "PKCS#8 private key body without its header",
           r"MII[A-Za-z0-9+/]{1,3}[A-Za-z0-9+/]{0,4}ADANBgkqhkiG9w0BAQEFAAS[A-Za-z0-9+/=]{20,}",
           "adanbgkqhkig9w0baqefaas"),
    _token("age-secret-key", "age encryption secret key",
           r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", "age-secret-key-1"),
    _token("age-secret-key", "age plugin identity",
           r"AGE-PLUGIN-[A-Z0-9]+-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{20,}", "age-plugin-"),
    # --- JWT ------------------------------------------------------------------------
    _token("jwt", "JSON Web Token (header.payload[.signature])",
           r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", "eyj"),
    _token("jwt", "JSON Web Token, base64-encoded whole",
           r"ZXlK[A-Za-z0-9+/]{40,}={0,2}", "zxlk", entropy=3.5),
    # --- AWS ------------------------------------------------------------------------
    _r("aws-access-key", "AWS access key id",
       r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])",
       ("akia", "asia", "abia", "acca", "a3t"), boundary=True),
    _labelled("aws-secret-key", "AWS secret access key after an aws word",
              r"aws[\w.-]{0,20}secret|secret[_ .-]?access[_ .-]?key",
              r"[A-Za-z0-9/+]{40}", ("aws", "secret")),
    _r("aws-secret-key", "AWS secret access key after its key id (AKIA…), no labels; both go",
       r"(?P<s>(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16})(?![A-Z0-9])"
       r"[^\n]{0,160}?(?:\n[^\n]{0,160}?){0,2}?"
       r"(?<![A-Za-z0-9/+])(?P<s2>(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[a-z])"
       r"(?=[A-Za-z0-9/+]{0,39}[A-Z])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
       ("akia", "asia", "abia", "acca", "a3t"), context="pair", entropy=3.8, boundary=True),
    _r("aws-secret-key", "AWS secret access key before its key id, no labels; both go",
       r"(?<![A-Za-z0-9/+])(?P<s2>(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[a-z])"
       r"(?=[A-Za-z0-9/+]{0,39}[A-Z])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
       r"[^\n]{0,160}?(?:\n[^\n]{0,160}?){0,2}?"
       r"(?<![A-Z0-9])(?P<s>(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16})(?![A-Z0-9])",
       ("akia", "asia", "abia", "acca", "a3t"), context="pair", entropy=3.8),
    _token("aws-session-token", "AWS STS session token",
           r"(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE|FQoGZXIvYXdzE)[A-Za-z0-9/+=]{40,}",
           ("iqojb3jpz2lux2vj", "fwogzxivyxdze", "fqogzxivyxdze")),
    _token("aws-bedrock-key", "Amazon Bedrock API key", r"ABSK[A-Za-z0-9+/]{100,300}={0,2}",
           "absk"),
    # --- Google Cloud ---------------------------------------------------------------
    _token("gcp-api-key", "Google API key", r"AIza[0-9A-Za-z_-]{35}", "aiza"),
    _token("gcp-oauth-token", "Google OAuth access token", r"ya29\.[0-9A-Za-z_-]{20,}", "ya29."),
    _token("gcp-refresh-token", "Google OAuth refresh token", r"1//0[0-9A-Za-z_-]{40,}",
           "1//0"),
    _token("gcp-client-secret", "Google OAuth client secret", r"GOCSPX-[0-9A-Za-z_-]{28}",
           "gocspx-"),
    _r("gcp-client-secret", "Google OAuth client id next to a legacy 24-character secret",
       r"(?P<s>\b\d{6,}-[a-z0-9]{32}\.apps\.googleusercontent\.com)[^\n]{0,160}?"
       r"(?<![A-Za-z0-9_-])(?P<s2>(?=[\w-]{0,23}\d)(?=[\w-]{0,23}[A-Z])[A-Za-z0-9_-]{24})"
       r"(?![A-Za-z0-9_-])", "googleusercontent", context="pair", entropy=3.5),
    _token("firebase-cloud-messaging", "Firebase Cloud Messaging server key",
           r"AAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{100,}", "apa91b"),
    # --- Azure ----------------------------------------------------------------------
    _r("azure-storage-key", "Azure storage account key in a connection string",
       r"(?i)(?:AccountKey|SharedAccessKey)\s*=\s*(?P<s>[A-Za-z0-9+/]{40,86}={0,2})",
       ("accountkey", "sharedaccesskey")),
    _r("azure-sas-signature", "Azure shared access signature in a URL or SAS string",
       r"(?i)(?<![A-Za-z0-9])sig=(?P<s>[A-Za-z0-9%+/=]{30,})", "sig="),
    _r("azure-client-secret", "Azure AD / Entra client secret",
       r"(?<![A-Za-z0-9_~.])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])",
       "q~"),
    _labelled("azure-devops-pat", "Azure DevOps personal access token",
              r"azure[\w.-]{0,20}|ado[_-]?pat|devops[\w.-]{0,20}|AZDO[\w]{0,20}",
              r"(?:[a-z2-7]{52}|[A-Za-z0-9]{76}AZDO[A-Za-z0-9]{4})", ("azure", "ado", "devops",
                                                                     "azdo")),
    _labelled("azure-openai-key", "Azure OpenAI / Cognitive Services key",
              r"azure[\w.-]{0,30}|cognitive[\w.-]{0,20}", r"[a-f0-9]{32}", ("azure",
                                                                           "cognitive")),
    # --- GitHub ---------------------------------------------------------------------
    _token("github-token", "GitHub personal, OAuth, user-to-server, server-to-server or "
           "refresh token", r"gh[pousr]_[A-Za-z0-9]{36,255}",
           ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    _token("github-token", "GitHub fine-grained personal access token",
           r"github_pat_[A-Za-z0-9_]{22,255}", "github_pat_"),
    _r("github-token", "GitHub App client id next to its 40-hex client secret",
       r"(?P<s>Iv1\.[a-f0-9]{16}|Iv23[A-Za-z0-9]{16}|Ov23[A-Za-z0-9]{16})"
       r"[^\n]{0,160}?(?<![A-Za-z0-9])(?P<s2>[a-f0-9]{40})(?![A-Za-z0-9])",
       ("iv1.", "iv23", "ov23"), context="pair", boundary=True),
    # --- GitLab ---------------------------------------------------------------------
    _token("gitlab-token", "GitLab personal, deploy, runner, trigger, job, OAuth, SCIM, "
           "feed, incoming-mail, agent or feature-flag token",
           r"gl(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt|agent|ffct)-[A-Za-z0-9_.-]{20,}",
           ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-", "glsoat-", "glft-",
            "glimt-", "glagent-", "glffct-")),
    _token("gitlab-token", "GitLab runner registration token", r"GR1348941[A-Za-z0-9_-]{20}",
           "gr1348941"),
    _r("gitlab-token", "GitLab session cookie", r"_gitlab_session=(?P<s>[0-9a-z]{32})",
       "_gitlab_session="),
    # --- Atlassian and Bitbucket -----------------------------------------------------
    _token("atlassian-token", "Atlassian API token", r"ATATT3[A-Za-z0-9_=-]{100,300}",
           "atatt3"),
    _token("atlassian-token", "Bitbucket app password / repository access token",
           r"AT(?:BB|CTT3)[A-Za-z0-9_=.-]{28,300}", ("atbb", "atctt3")),
    _labelled("atlassian-token", "Atlassian / Jira / Confluence legacy API token",
              r"atlassian|confluence|jira", r"[A-Za-z0-9]{24}", ("atlassian", "confluence",
                                                                 "jira"), entropy=3.5),
    _labelled("bitbucket-secret", "Bitbucket OAuth client secret or id",
              r"bitbucket", r"(?:[A-Za-z0-9=_-]{64}|[A-Za-z0-9]{32})", "bitbucket",
              entropy=3.5),
    # --- package registries ----------------------------------------------------------
    _token("npm-token", "npm access token", r"npm_[A-Za-z0-9]{36}", "npm_"),
    _token("pypi-token", "PyPI upload token", r"pypi-AgE[A-Za-z0-9_-]{50,}", "pypi-age"),
    _token("rubygems-token", "RubyGems API key", r"rubygems_[a-f0-9]{48}", "rubygems_"),
    _token("dockerhub-token", "Docker Hub personal or organisation access token",
           r"dckr_(?:pat|oat)_[A-Za-z0-9_-]{27,}", ("dckr_pat_", "dckr_oat_")),
    _token("clojars-token", "Clojars deploy token", r"CLOJARS_[A-Za-z0-9]{60}", "clojars_"),
    _token("nuget-key", "NuGet API key", r"oy2[a-z0-9]{43}", "oy2", entropy=3.5),
    _r("nuget-key", "NuGet.config clear-text password",
       r"(?i)<add\s+key=\"(?:ClearText)?Password\"\s+value=\"(?P<s>[^\"]{4,})\"",
       "<add key="),
    # --- LLM and ML providers ----------------------------------------------------------
    _token("anthropic-key", "Anthropic API, admin or OAuth key",
           r"sk-ant-(?:api|admin|oat|sid)\d{2}-[A-Za-z0-9_-]{20,}", "sk-ant-"),
    _token("openai-key", "OpenAI (and OpenAI-compatible: OpenRouter, DeepSeek) key",
           r"sk-(?:proj-|svcacct-|admin-|or-v1-|None-)?[A-Za-z0-9_-]{20,}", "sk-"),
    _token("huggingface-token", "Hugging Face user or organisation token",
           r"(?:hf_|api_org_)[A-Za-z0-9]{30,}", ("hf_", "api_org_")),
    _labelled("cohere-key", "Cohere API key", r"cohere|co_api_key", r"[A-Za-z0-9]{40}",
              ("cohere", "co_api_key"), entropy=3.5),
    _token("replicate-token", "Replicate API token", r"r8_[A-Za-z0-9]{37}", "r8_"),
    _token("groq-key", "Groq API key", r"gsk_[A-Za-z0-9]{48,56}", "gsk_"),
    _labelled("mistral-key", "Mistral API key", r"mistral", r"[A-Za-z0-9]{32}", "mistral",
              entropy=3.5),
    _token("perplexity-key", "Perplexity API key", r"pplx-[A-Za-z0-9]{40,56}", "pplx-"),
    _token("xai-key", "xAI API key", r"xai-[A-Za-z0-9]{60,90}", "xai-"),
    _token("langsmith-key", "LangSmith API key", r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}",
           "lsv2_"),
    _token("pinecone-key", "Pinecone API key", r"pcsk_[A-Za-z0-9_]{40,}", "pcsk_"),
    _labelled("wandb-key", "Weights & Biases API key", r"wandb", r"[a-f0-9]{40}", "wandb"),
    _labelled("together-key", "Together AI API key", r"together", r"[a-f0-9]{64}",
              "together"),
    # --- Slack and chat ----------------------------------------------------------------
    _token("slack-token", "Slack bot, user, app, workspace, refresh or config token",
           r"xox[abposre]-[A-Za-z0-9-]{10,}", ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-",
                                              "xoxr-", "xoxe-")),
    _token("slack-token", "Slack config token", r"xoxe\.xox[bp]-\d-[A-Za-z0-9]{100,}",
           "xoxe."),
    _token("slack-token", "Slack app-level token", r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+", "xapp-"),
    _r("slack-webhook", "Slack incoming webhook or workflow trigger URL",
       r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_+-]+",
       "hooks.slack.com"),
    _r("discord-webhook", "Discord webhook URL",
       r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]+",
       "discord"),
    _labelled("discord-token", "Discord bot token", r"discord",
              r"[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}", "discord"),
    _token("telegram-token", "Telegram bot token", r"\d{8,10}:AA[A-Za-z0-9_-]{33}", ":aa"),
    _r("teams-webhook", "Microsoft Teams / Office 365 incoming webhook URL",
       r"https://[A-Za-z0-9.-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]+"
       r"(?:/IncomingWebhook/[A-Za-z0-9/_-]+)?", "webhook.office.com"),
    _r("zapier-webhook", "Zapier catch hook URL",
       r"https://hooks\.zapier\.com/hooks/catch/\d+/[A-Za-z0-9]+/?", "hooks.zapier.com"),
    # --- payments and commerce ----------------------------------------------------------
    _token("stripe-key", "Stripe secret, restricted or publishable key",
           r"(?:sk|rk|pk)_(?:live|test|prod)_[A-Za-z0-9]{10,}", ("sk_", "rk_", "pk_")),
    _token("stripe-webhook-secret", "Stripe webhook signing secret", r"whsec_[A-Za-z0-9]{24,}",
           "whsec_"),
    _token("shopify-token", "Shopify access token or shared secret",
           r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", ("shpat_", "shpca_", "shppa_", "shpss_")),
    _token("square-token", "Square access token or OAuth secret",
           r"(?:sq0atp|sq0csp|EAAA)[A-Za-z0-9_-]{22,60}", ("sq0atp", "sq0csp", "eaaa"),
           entropy=3.5),
    _token("braintree-token", "Braintree / PayPal access token",
           r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}", "access_token$"),
    # --- communications ------------------------------------------------------------------
    _token("twilio-api-key", "Twilio API key SID", r"SK[0-9a-fA-F]{32}", "sk"),
    _r("twilio-auth-token", "Twilio account SID next to its 32-hex auth token",
       r"(?P<s>AC[a-f0-9]{32})(?![A-Za-z0-9])[^\n]{0,160}?"
       r"(?<![A-Za-z0-9])(?P<s2>[a-f0-9]{32})(?![A-Za-z0-9])", "ac", context="pair",
       boundary=True),
    _token("sendgrid-key", "SendGrid API key", r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,64}",
           "sg."),
    _token("mailgun-key", "Mailgun private API key", r"key-[0-9a-f]{32}", "key-"),
    _labelled("mailgun-key", "Mailgun signing key or new-format private key", r"mailgun",
              r"[a-f0-9]{32}-[a-f0-9]{8}-[a-f0-9]{8}", "mailgun"),
    _token("mailchimp-key", "Mailchimp API key", r"[a-f0-9]{32}-us\d{1,2}", "-us"),
    _labelled("postmark-token", "Postmark server or account token", r"postmark", _UUID,
              "postmark"),
    # --- observability ---------------------------------------------------------------------
    _labelled("datadog-key", "Datadog API or application key",
              r"datadog|dd[_-]?api[_-]?key|dd[_-]?app(?:lication)?[_-]?key|dd[_-]?client[_-]?token",
              r"(?:[a-f0-9]{40}|[a-f0-9]{32}|pub[a-f0-9]{32})", ("datadog", "dd_", "dd-")),
    _token("sentry-token", "Sentry user or organisation auth token",
           r"(?:sntryu_[a-f0-9]{64}|sntrys_eyJ[A-Za-z0-9+/=_]{40,})", ("sntryu_", "sntrys_")),
    _labelled("sentry-token", "Sentry legacy auth token", r"sentry", r"[a-f0-9]{64}", "sentry"),
    _token("newrelic-key", "New Relic user, ingest or browser key",
           r"(?:NRAK-[A-Z0-9]{27}|NRII-[A-Za-z0-9_-]{32}|NRJS-[a-f0-9]{19}|[a-f0-9]{36}NRAL)",
           ("nrak-", "nrii-", "nrjs-", "nral")),
    _token("grafana-token", "Grafana API key, cloud or service-account token",
           r"(?:eyJrIjoi[A-Za-z0-9]{70,400}={0,3}|glc_[A-Za-z0-9+/]{32,400}={0,3}|"
           r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})", ("eyjrijoi", "glc_", "glsa_")),
    _labelled("honeycomb-key", "Honeycomb API key", r"honeycomb", r"[A-Za-z0-9]{22,32}",
              "honeycomb", entropy=3.5),
    # --- hosting and platforms --------------------------------------------------------------
    _token("heroku-key", "Heroku API key (v2)", r"HRKU-[A-Za-z0-9_-]{58,}", "hrku-"),
    _labelled("heroku-key", "Heroku API key (UUID after a heroku word)", r"heroku", _UUID,
              "heroku"),
    _token("digitalocean-token", "DigitalOcean personal, OAuth or refresh token",
           r"do[opr]_v1_[a-f0-9]{64}", ("dop_v1_", "doo_v1_", "dor_v1_")),
    _token("vercel-token", "Vercel token (prefixed)", r"vc[pikar]_[A-Za-z0-9]{24,}",
           ("vcp_", "vci_", "vck_", "vca_", "vcr_")),
    _labelled("vercel-token", "Vercel token (legacy 24-character, after a vercel word)",
              r"vercel|now[_-]token", r"[A-Za-z0-9]{24}", ("vercel", "now_token", "now-token"),
              entropy=3.5),
    _token("netlify-token", "Netlify personal access token (prefixed)",
           r"nf[pcob]_[A-Za-z0-9]{36,}", ("nfp_", "nfc_", "nfo_", "nfb_")),
    _labelled("netlify-token", "Netlify access token (after a netlify word)", r"netlify",
              r"[A-Za-z0-9=_-]{40,46}", "netlify", entropy=3.5),
    _token("fly-token", "Fly.io access or macaroon token",
           r"(?:fo1_[A-Za-z0-9_-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3})",
           ("fo1_", "fm1", "fm2_")),
    _token("render-key", "Render API key", r"rnd_[A-Za-z0-9]{32}", "rnd_"),
    _labelled("railway-token", "Railway project or account token", r"railway", _UUID,
              "railway"),
    _labelled("cloudflare-token", "Cloudflare API token or global key", r"cloudflare|cf[_-]api",
              r"(?:[A-Za-z0-9_-]{40}|[a-f0-9]{37})", ("cloudflare", "cf_api", "cf-api"),
              entropy=3.5),
    _token("cloudflare-token", "Cloudflare origin CA key", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}",
           "v1.0-"),
    _token("planetscale-token", "PlanetScale token or password",
           r"pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.-]{32,64}", "pscale_"),
    _token("supabase-token", "Supabase access token or secret key",
           r"(?:sbp_(?:oauth_)?[a-f0-9]{40}|sb_secret_[A-Za-z0-9_-]{20,})",
           ("sbp_", "sb_secret_")),
    _token("databricks-token", "Databricks personal access token or OAuth secret",
           r"(?:dapi|dose)[a-f0-9]{32}(?:-\d)?", ("dapi", "dose")),
    _token("doppler-token", "Doppler personal, service, CLI, SCIM or audit token",
           r"dp\.(?:pt|st|ct|sa|scim|audit)\.(?:[A-Za-z0-9_-]+\.)?[A-Za-z0-9]{40,44}", "dp."),
    _token("postman-key", "Postman API key", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}", "pmak-"),
    _token("linear-key", "Linear API key or OAuth token",
           r"lin_(?:api|oauth)_[A-Za-z0-9]{40,64}", ("lin_api_", "lin_oauth_")),
    _labelled("linear-key", "Linear OAuth client secret", r"linear", r"[a-f0-9]{32}",
              "linear"),
    _token("notion-token", "Notion integration token (ntn_)",
           r"ntn_[0-9]{11}[A-Za-z0-9]{35}", "ntn_"),
    _token("notion-token", "Notion legacy integration token (secret_)",
           r"secret_[A-Za-z0-9]{43}", "secret_"),
    _labelled("okta-token", "Okta API token", r"okta", r"00[A-Za-z0-9=_-]{40}", "okta"),
    _token("hashicorp-token", "HashiCorp Vault service/batch/recovery token",
           r"hv[sbr]\.[A-Za-z0-9_-]{24,}", ("hvs.", "hvb.", "hvr.")),
    _token("hashicorp-token", "Terraform Cloud / Enterprise API token",
           r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}", ".atlasv1."),
    _token("pulumi-token", "Pulumi access token", r"pul-[a-f0-9]{40}", "pul-"),
    _token("onepassword-token", "1Password service-account token or secret key",
           r"(?:ops_eyJ[A-Za-z0-9+/]{100,}={0,3}|A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|"
           r"[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5})",
           ("ops_eyj", "a3-")),
    _token("tailscale-key", "Tailscale auth, API or OAuth client key",
           r"tskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9]+-[A-Za-z0-9]+", "tskey-"),
    _labelled("ngrok-token", "ngrok auth token", r"ngrok", r"[0-9][A-Za-z0-9]{26}_[A-Za-z0-9]{21}",
              "ngrok"),
    _token("sonarqube-token", "SonarQube / SonarCloud token", r"sq[pua]_[a-f0-9]{40}",
           ("sqp_", "squ_", "sqa_")),
    _token("circleci-token", "CircleCI personal token", r"CCIPAT_[A-Za-z0-9]{22}_[a-f0-9]{40}",
           "ccipat_"),
    _token("buildkite-token", "Buildkite agent or user token", r"bk(?:ua|agt)_[a-f0-9]{40}",
           ("bkua_", "bkagt_")),
    _labelled("snyk-token", "Snyk API token", r"snyk", _UUID, "snyk"),
    _labelled("codecov-token", "Codecov upload token", r"codecov", _UUID, "codecov"),
    _token("figma-token", "Figma personal access token", r"figd_[A-Za-z0-9_-]{40,}", "figd_"),
    _token("airtable-token", "Airtable personal access token",
           r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}", "pat"),
    _token("mapbox-token", "Mapbox secret token", r"sk\.eyJ[A-Za-z0-9_-]{50,}\.[A-Za-z0-9_-]{20,}",
           "sk.eyj"),
    _token("facebook-token", "Facebook / Meta access token", r"EAA[BC][A-Za-z0-9]{80,}", "eaa"),
    _token("ctxlake-token", "ctxlake's own API token (fleet.tokens issues them)",
           re.escape(API_TOKEN_PREFIX) + r"[A-Za-z0-9_-]{43}", API_TOKEN_PREFIX),
    _token("django-secret-key", "Django generated secret key",
           r"django-insecure-[^\s'\"`]{20,}", "django-insecure-"),
    # --- credentials in URLs, headers and commands ----------------------------------------
    _r("url-password", "password in a URL of any scheme (user may be empty: redis://:pw@h)",
       r"(?i)(?<![A-Za-z0-9+.-])[a-z][a-z0-9+.-]{1,30}://[^\s/:@?#\"'<>]{0,128}:"
       r"(?P<s>[^\s/?#\"'<>]{1,256})@(?=[A-Za-z0-9\[._-])", "://", context="assignment"),
    _r("authorization-header", "Authorization / Proxy-Authorization header value",
       r"(?i)(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest|"
       r"negotiate|apikey|api-key|sso-key|ntlm|aws4-hmac-sha256|key|otr)\s+)?"
       r"(?P<s>[^\s\"',;]{6,}(?:,\s*[A-Za-z]+=[^\s,\"']+)*)", "authorization",
       context="assignment"),
    _r("bearer-token", "a bearer token in prose or code",
       r"(?i)\bbearer\s+(?P<s>[A-Za-z0-9._~+/-]{16,}=*)", "bearer", context="assignment"),
    _r("curl-user", "curl -u / --user user:password",
       r"(?i)\bcurl\b[^\n]*?\s(?:-u|--user)(?:=|\s+)(?:\"[^\":]*:(?P<s>[^\"]+)\"|"
       r"'[^':]*:(?P<s2>[^']+)'|[^\s:'\"]*:(?P<s3>[^\s'\"]+))", "curl", context="assignment"),
    _r("cli-password", "docker/podman/helm/oras login -p / --password",
       r"(?i)\b(?:docker|podman|helm|oras|buildah|skopeo|nerdctl)\b[^\n]*?\blogin\b[^\n]*?\s"
       r"(?:-p|--password)(?:=|\s+)(?P<s>\"[^\"]+\"|'[^']+'|[^\s\"'|;&]+)",
       "login", context="assignment"),
    _r("cli-password", "mysql / mysqldump / mariadb -pPASSWORD or --password=",
       r"(?i)\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlsh|mariadb|mariadb-dump)\b"
       r"[^\n]*?\s(?:-p|--password=)(?P<s>\"[^\"]+\"|'[^']+'|[^\s\"'|;&]+)",
       ("mysql", "mariadb"), context="assignment"),
    _r("cli-password", "sshpass -p, redis-cli -a, htpasswd -b",
       r"(?i)\b(?:sshpass\s+-p\s*|redis-cli\b[^\n]*?\s-a\s+|htpasswd\s+-[a-zA-Z]*b[a-zA-Z]*\s+"
       r"\S+\s+\S+\s+)(?P<s>\"[^\"]+\"|'[^']+'|[^\s\"'|;&]+)",
       ("sshpass", "redis-cli", "htpasswd"), context="assignment"),
    _r("cli-password", "mongo/mongosh/mongodump -p, sqlcmd -P, ldapsearch -w, smbclient -U u%pw",
       r"(?i)\b(?:(?:mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport)\b[^\n]*?\s"
       r"(?:-p|--password)(?:=|\s+)|sqlcmd\b[^\n]*?\s-P\s*|ldap(?:search|modify|add|delete)\b"
       r"[^\n]*?\s-w\s+|smbclient\b[^\n]*?\s-U\s*[^\s%]+%)"
       r"(?P<s>\"[^\"]+\"|'[^']+'|[^\s\"'|;&]+)",
       ("mongo", "sqlcmd", "ldap", "smbclient"), context="assignment"),
    _r("cli-password", "openssl -passin/-passout/-pass pass:PASSWORD",
       r"(?i)-pass(?:in|out|word)?\s+pass:(?P<s>\S+)", "pass:", context="assignment"),
    _r("netrc-password", ".netrc machine … login … password …",
       r"(?i)\b(?:machine\s+\S+|default)\s+(?:(?:login|account|port)\s+\S+\s+)*"
       r"password\s+(?P<s>\S+)", ("machine", "default"), context="assignment"),
    _r("session-cookie", "a session cookie value",
       r"(?i)(?<![A-Za-z0-9_])(?:sessionid|session_id|phpsessid|jsessionid|connect\.sid|"
       r"_session|laravel_session|__session|remember_token)=(?P<s>[A-Za-z0-9%._~+/-]{16,})",
       ("session", "sessid", "connect.sid", "remember_token"), context="assignment",
       entropy=3.0),
)

# Name patterns for the key=value rules (the engine in redact.py owns the value checks).
# STRONG names mean "what follows is a credential"; WEAK ones (`*_key`, `auth`, `salt`)
# only when the value is also high-entropy, so `cache_key=user:1` and `sort_key=name` survive.
STRONG_NAME = (
    r"(?:password|passwd|passwort|passphrase|(?<![A-Za-z])pwd|(?:(?<![A-Za-z])|_|-|\.)pass|"
    r"secret|token|api[_.-]?key|apikey|access[_.-]?key|secret[_.-]?key|private[_.-]?key"
    r"(?:[_.-]?id)?|client[_.-]?secret|credentials?|creds|auth[_.-]?key|signing[_.-]?key|"
    r"encryption[_.-]?key|master[_.-]?key|account[_.-]?key|license[_.-]?key|"
    r"webhook[_.-]?secret|sas|_auth|passcode|pin[_.-]?code)"
)
WEAK_NAME = r"(?:key|auth|salt|signature|cookie|session)"
NAME_KEYWORDS = ("pass", "pwd", "secret", "token", "key", "cred", "auth", "sas", "salt",
                 "signature", "cookie", "session", "pin")
