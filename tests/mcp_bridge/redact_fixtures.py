"""The redactor's own true-positive and false-positive fixtures, as data.

TRUE_POSITIVES: (kind, text, secrets) — `text` is a secret in the context an agent would
write it (env, shell, dotenv, YAML, TOML, JSON, INI, code, HTTP logs, URLs, handoff prose);
after scrubbing no string of `secrets` may survive, and `[REDACTED:kind]` must appear.
FALSE_POSITIVES: text that must come back unchanged (placeholders, references, hashes,
UUIDs, ordinary words, paths, look-alikes).

The secrets are synthetic: drawn from a seeded generator in each vendor's alphabet and
length, so no real credential is in the repository and the fixtures are the same on every
run.
"""

from __future__ import annotations

import base64
import random
import string
from typing import NamedTuple

_rng = random.Random(14)
_LOWER, _UPPER, _DIGITS = string.ascii_lowercase, string.ascii_uppercase, string.digits
ALNUM = _LOWER + _UPPER + _DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"
BASE32 = _LOWER + "234567"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def tok(n: int, alphabet: str = ALNUM) -> str:
    """n random characters of `alphabet`; alphanumeric ones always mix all three classes."""
    while True:
        value = "".join(_rng.choice(alphabet) for _ in range(n))
        if alphabet not in (ALNUM, B64, URLSAFE) or n < 12 or (
            any(c in _LOWER for c in value) and any(c in _UPPER for c in value)
            and any(c in _DIGITS for c in value)
        ):
            return value


def uuid() -> str:
    h = tok(32, HEX)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


class Case(NamedTuple):
    kind: str
    text: str
    secrets: tuple[str, ...]


TRUE_POSITIVES: list[Case] = []


def tp(kind: str, template: str, *secrets: str) -> None:
    """Add a fixture: `template` holds {0}, {1}… where the secrets go."""
    TRUE_POSITIVES.append(Case(kind, template.format(*secrets), secrets))


# --- AWS -------------------------------------------------------------------------------
akia = "AKIA" + tok(16, _UPPER + "234567")
aws_secret = tok(40, B64)
tp("aws-access-key", "export AWS_ACCESS_KEY_ID={0}", akia)
tp("aws-access-key", "aws configure set aws_access_key_id {0} --profile ci", akia)
tp("aws-secret-key", "aws_secret_access_key = {0}", aws_secret)
tp("aws-access-key", "[default]\naws_access_key_id = {0}\naws_secret_access_key = {1}\n", akia,
   aws_secret)
tp("aws-access-key", "creds: {0} {1} (ci user)", akia, aws_secret)
tp("aws-access-key", "key {0} secret {1}", akia, aws_secret)
tp("aws-access-key", "{0}:{1}", akia, aws_secret)
tp("aws-access-key", "{1} / {0}", akia, aws_secret)
tp("aws-access-key", "Access key ID,Secret access key\n{0},{1}\n", akia, aws_secret)
tp("aws-access-key", "found {0}\nand on the next line\n  {1}\n", akia, aws_secret)
tp("aws-access-key", '{{"AccessKeyId": "{0}", "SecretAccessKey": "{1}"}}', "ASIA" + tok(16, _UPPER),
   tok(40, B64))
tp("aws-session-token", "AWS_SESSION_TOKEN={0}", "IQoJb3JpZ2luX2VjE" + tok(180, B64))
tp("aws-session-token", "the session token {0} expires at noon", "FwoGZXIvYXdzE" + tok(120, B64))
tp("secret-assignment", 'aws_session_token="{0}"', tok(200, B64))
tp("aws-bedrock-key", "BEDROCK={0}", "ABSK" + tok(132, B64) + "=")

# --- Google Cloud --------------------------------------------------------------------------
tp("gcp-api-key", "const maps = new Loader({{ apiKey: '{0}' }})", "AIza" + tok(35, URLSAFE))
tp("gcp-api-key", "GET https://maps.googleapis.com/maps/api/geocode/json?key={0}&address=x",
   "AIza" + tok(35, URLSAFE))
tp("gcp-oauth-token", "gcloud auth print-access-token -> {0}", "ya29.a0" + tok(120, URLSAFE))
tp("gcp-refresh-token", '"refresh_token": "{0}"', "1//0g" + tok(90, URLSAFE))
tp("gcp-client-secret", "GOOGLE_CLIENT_SECRET={0}", "GOCSPX-" + tok(28, URLSAFE))
gcp_pem_body = base64.b64encode(_rng.randbytes(600)).decode()
tp("private-key", '{{"type": "service_account", "project_id": "demo-1", "private_key_id": "{1}", '
   '"private_key": "-----BEGIN PRIVATE KEY-----\\n{0}\\n-----END PRIVATE KEY-----\\n", '
   '"client_email": "ci@demo-1.iam.gserviceaccount.com"}}', gcp_pem_body[:400], tok(40, HEX))
tp("gcp-client-secret", "client {0} secret {1}",
   "123456789012-" + tok(32, _LOWER + _DIGITS) + ".apps.googleusercontent.com", tok(24, URLSAFE))
tp("firebase-cloud-messaging", "FCM server key: {0}",
   "AAAA" + tok(7, URLSAFE) + ":APA91b" + tok(134, URLSAFE))

# --- Azure -----------------------------------------------------------------------------------
tp("azure-storage-key", "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={0};"
   "EndpointSuffix=core.windows.net", tok(86, B64) + "==")
tp("azure-storage-key", "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root"
   "ManageSharedAccessKey;SharedAccessKey={0}", tok(43, B64) + "=")
tp("azure-sas-signature", "https://acme.blob.core.windows.net/c/f.zip?sv=2022-11-02&ss=b&srt=o"
   "&sp=r&se=2026-01-01T00:00:00Z&sig={0}", tok(43, ALNUM) + "%3D")
tp("azure-client-secret", "AZURE_CLIENT_SECRET={0}", tok(3, ALNUM) + "8Q~" + tok(34, ALNUM))
tp("azure-client-secret", "az login --service-principal -u app -p {0} --tenant t",
   tok(3, ALNUM) + "7Q~" + tok(31, ALNUM + "_.-"))
tp("azure-devops-pat", "AZURE_DEVOPS_PAT: {0}", tok(52, BASE32))
tp("azure-openai-key", "AZURE_OPENAI_API_KEY={0}", tok(32, HEX))

# --- GitHub / GitLab / Atlassian / registries ------------------------------------------------
for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
    tp("github-token", "GITHUB_TOKEN={0}", prefix + tok(36))
tp("github-token", "git clone https://x-access-token:{0}@github.com/acme/app.git", "ghs_" + tok(36))
tp("github-token", "gh auth login --with-token <<< {0}", "github_pat_11A" + tok(79, ALNUM + "_"))
tp("github-token", "app {0} with secret {1}", "Iv1." + tok(16, HEX), tok(40, HEX))
tp("gitlab-token", "GITLAB_TOKEN={0}", "glpat-" + tok(20, URLSAFE))
tp("gitlab-token", "deploy token {0}", "gldt-" + tok(20, URLSAFE))
tp("gitlab-token", "gitlab-runner register --token {0}", "glrt-" + tok(20, URLSAFE))
tp("gitlab-token", "curl --request POST --form token={0} https://gitlab/api/v4/trigger",
   "glptt-" + tok(40, HEX))
tp("gitlab-token", "registration {0}", "GR1348941" + tok(20, URLSAFE))
tp("atlassian-token", "JIRA_API_TOKEN={0}", "ATATT3xFfGF0" + tok(180, URLSAFE))
tp("atlassian-token", "bitbucket app password {0}", "ATBB" + tok(28, ALNUM))
tp("bitbucket-secret", "BITBUCKET_CLIENT_SECRET={0}", tok(32))
tp("npm-token", "//registry.npmjs.org/:_authToken={0}", "npm_" + tok(36))
tp("npm-token", "npm token created: {0}", "npm_" + tok(36))
tp("pypi-token", "[pypi]\nusername = __token__\npassword = {0}\n",
   "pypi-AgEIcHlwaS5vcmc" + tok(70, URLSAFE))
tp("pypi-token", "twine upload -p {0} dist/*", "pypi-AgEIcHlwaS5vcmc" + tok(60, URLSAFE))
tp("rubygems-token", ":rubygems_api_key: {0}", "rubygems_" + tok(48, HEX))
tp("dockerhub-token", "echo {0} | docker login -u acme --password-stdin",
   "dckr_pat_" + tok(27, URLSAFE))
tp("cli-password", "docker login -u acme -p {0} registry.acme.io", tok(14))
tp("cli-password", "docker login --password {0} ghcr.io", tok(18))
tp("secret-assignment", '{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{0}"}}}}}}',
   base64.b64encode(b"acme:" + tok(16).encode()).decode())
tp("nuget-key", "dotnet nuget push app.nupkg --api-key {0}", "oy2" + tok(43, _LOWER + _DIGITS))
tp("nuget-key", '<add key="ClearTextPassword" value="{0}" />', tok(16))
tp("clojars-token", "CLOJARS_PASSWORD={0}", "CLOJARS_" + tok(60, _LOWER + _DIGITS))

# --- LLM and ML providers ---------------------------------------------------------------------
tp("openai-key", "OPENAI_API_KEY=sk-proj-{0}", tok(74, URLSAFE) + "T3BlbkFJ" + tok(74, URLSAFE))
tp("openai-key", "client = OpenAI(api_key=\"{0}\")", "sk-" + tok(20) + "T3BlbkFJ" + tok(20))
tp("openai-key", "openrouter key {0}", "sk-or-v1-" + tok(64, HEX))
tp("anthropic-key", "ANTHROPIC_API_KEY={0}", "sk-ant-api03-" + tok(93, URLSAFE) + "AA")
tp("anthropic-key", "x-api-key: {0}", "sk-ant-admin01-" + tok(93, URLSAFE) + "AA")
tp("anthropic-key", "claude setup-token printed {0}", "sk-ant-oat01-" + tok(80, URLSAFE))
tp("huggingface-token", "huggingface-cli login --token {0}", "hf_" + tok(34, _LOWER + _UPPER))
tp("huggingface-token", "HF_TOKEN: {0}", "api_org_" + tok(34, _LOWER + _UPPER))
tp("cohere-key", "COHERE_API_KEY={0}", tok(40))
tp("cohere-key", "co = cohere.Client('{0}')", tok(40))
tp("replicate-token", "REPLICATE_API_TOKEN={0}", "r8_" + tok(37))
tp("groq-key", "groq_api_key: {0}", "gsk_" + tok(52))
tp("mistral-key", "MISTRAL_API_KEY={0}", tok(32))
tp("secret-assignment", "client = Mistral(api_key=\"{0}\")  # mistral", tok(32))
tp("perplexity-key", "PPLX={0}", "pplx-" + tok(48))
tp("xai-key", "XAI={0}", "xai-" + tok(80))
tp("langsmith-key", "LANGCHAIN_API_KEY={0}", "lsv2_pt_" + tok(32, HEX) + "_" + tok(10, HEX))
tp("pinecone-key", "pc = Pinecone('{0}')", "pcsk_" + tok(50, ALNUM + "_"))
tp("wandb-key", "WANDB_API_KEY={0}", tok(40, HEX))

# --- SaaS ----------------------------------------------------------------------------------------
tp("slack-token", "SLACK_BOT_TOKEN={0}", "xoxb-" + tok(12, _DIGITS) + "-" + tok(13, _DIGITS) + "-"
   + tok(24))
tp("slack-token", "user token {0}", "xoxp-" + "-".join(tok(12, _DIGITS) for _ in range(3)) + "-"
   + tok(32, HEX))
tp("slack-token", "SLACK_APP_TOKEN={0}", "xapp-1-A" + tok(10, _UPPER + _DIGITS) + "-"
   + tok(13, _DIGITS) + "-" + tok(64, HEX))
tp("slack-webhook", "curl -X POST -d '{{\"text\":\"hi\"}}' {0}",
   "https://hooks.slack.com/services/T" + tok(8, _UPPER + _DIGITS) + "/B"
   + tok(10, _UPPER + _DIGITS) + "/" + tok(24))
tp("slack-webhook", "webhook_url: {0}", "https://hooks.slack.com/workflows/T0" + tok(8, _UPPER)
   + "/A0" + tok(8, _UPPER) + "/4" + tok(17, _DIGITS) + "/" + tok(24))
tp("stripe-key", "STRIPE_SECRET_KEY={0}", "sk_live_" + tok(99))
tp("stripe-key", "stripe.api_key = \"{0}\"", "rk_test_" + tok(24))
tp("stripe-webhook-secret", "STRIPE_WEBHOOK_SECRET={0}", "whsec_" + tok(32))
tp("twilio-api-key", "TWILIO_API_KEY={0}", "SK" + tok(32, HEX))
tp("twilio-auth-token", "twilio account {0} auth {1}", "AC" + tok(32, HEX), tok(32, HEX))
tp("secret-assignment", "TWILIO_AUTH_TOKEN={0}", tok(32, HEX))
tp("sendgrid-key", "SENDGRID_API_KEY={0}", "SG." + tok(22, URLSAFE) + "." + tok(43, URLSAFE))
tp("mailgun-key", "MAILGUN_API_KEY={0}", "key-" + tok(32, HEX))
tp("mailgun-key", "mailgun signing key: {0}", tok(32, HEX) + "-" + tok(8, HEX) + "-" + tok(8, HEX))
tp("mailchimp-key", "MAILCHIMP_KEY={0}", tok(32, HEX) + "-us21")
tp("shopify-token", "SHOPIFY_ACCESS_TOKEN={0}", "shpat_" + tok(32, HEX))
tp("shopify-token", "shared secret {0}", "shpss_" + tok(32, HEX))
tp("square-token", "SQUARE_ACCESS_TOKEN={0}", "EAAA" + tok(60, URLSAFE))
tp("datadog-key", "DD_API_KEY={0}", tok(32, HEX))
tp("datadog-key", "DATADOG_APP_KEY={0}", tok(40, HEX))
tp("url-password", "SENTRY_DSN=https://" + tok(32, HEX) + ":{0}@o123.ingest.sentry.io/42",
   tok(32, HEX))
tp("sentry-token", "SENTRY_AUTH_TOKEN={0}", "sntryu_" + tok(64, HEX))
tp("sentry-token", "sentry-cli --auth-token {0}", "sntrys_eyJpYXQiOjE3" + tok(120, B64) + "_"
   + tok(43, B64))
tp("heroku-key", "HEROKU_API_KEY={0}", uuid())
tp("heroku-key", "heroku token {0}", "HRKU-AA" + tok(58, URLSAFE))
tp("digitalocean-token", "doctl auth init -t {0}", "dop_v1_" + tok(64, HEX))
tp("vercel-token", "VERCEL_TOKEN={0}", tok(24))
tp("vercel-token", "vercel deploy --token {0}", "vcp_" + tok(56))
tp("netlify-token", "NETLIFY_AUTH_TOKEN={0}", "nfp_" + tok(36))
tp("netlify-token", "netlify: {0}", tok(43, URLSAFE))
tp("linear-key", "LINEAR_API_KEY={0}", "lin_api_" + tok(40))
tp("notion-token", "NOTION_TOKEN={0}", "ntn_" + tok(11, _DIGITS) + tok(35))
tp("notion-token", "const notion = new Client({{ auth: \"{0}\" }})", "secret_" + tok(43))
tp("okta-token", "OKTA_API_TOKEN={0}", "00" + tok(40, URLSAFE))
tp("databricks-token", "DATABRICKS_TOKEN={0}", "dapi" + tok(32, HEX))
tp("databricks-token", "databricks configure --token <<< {0}-2", "dapi" + tok(32, HEX))
tp("postman-key", "POSTMAN_API_KEY={0}", "PMAK-" + tok(24, HEX) + "-" + tok(34, HEX))
tp("doppler-token", "DOPPLER_TOKEN={0}", "dp.st.prd." + tok(43))
tp("doppler-token", "doppler login printed {0}", "dp.pt." + tok(43))
tp("supabase-token", "SUPABASE_ACCESS_TOKEN={0}", "sbp_" + tok(40, HEX))
tp("jwt", "SUPABASE_SERVICE_ROLE_KEY={0}",
   "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIiwicmVmIjoi"
   + tok(20, _LOWER) + "In0." + tok(43, URLSAFE))
tp("hashicorp-token", "VAULT_TOKEN={0}", "hvs." + tok(90, URLSAFE))
tp("hashicorp-token", "credentials \"app.terraform.io\" {{ token = \"{0}\" }}",
   tok(14) + ".atlasv1." + tok(67, URLSAFE))
tp("pulumi-token", "PULUMI_ACCESS_TOKEN={0}", "pul-" + tok(40, HEX))
tp("tailscale-key", "tailscale up --authkey {0}", "tskey-auth-" + tok(16) + "-" + tok(32))
tp("grafana-token", "GRAFANA_TOKEN={0}", "glsa_" + tok(32) + "_" + tok(8, HEX))
tp("newrelic-key", "NEW_RELIC_API_KEY={0}", "NRAK-" + tok(27, _UPPER + _DIGITS))
tp("figma-token", "FIGMA_TOKEN={0}", "figd_" + tok(40, URLSAFE))
tp("airtable-token", "AIRTABLE_PAT={0}", "pat" + tok(14) + "." + tok(64, HEX))
tp("telegram-token", "bot = Bot('{0}')", tok(10, _DIGITS) + ":AA" + tok(33, URLSAFE))
tp("discord-webhook", "DISCORD_WEBHOOK={0}", "https://discord.com/api/webhooks/"
   + tok(18, _DIGITS) + "/" + tok(68, URLSAFE))
tp("teams-webhook", "teams: {0}", "https://acme.webhook.office.com/webhookb2/" + uuid() + "@"
   + uuid() + "/IncomingWebhook/" + tok(32, HEX) + "/" + uuid())
tp("fly-token", "FLY_API_TOKEN=FlyV1 {0}", "fm2_" + tok(140, B64))
tp("planetscale-token", "pscale password: {0}", "pscale_pw_" + tok(43, URLSAFE))
tp("sonarqube-token", "SONAR_TOKEN={0}", "sqp_" + tok(40, HEX))
tp("onepassword-token", "OP_SERVICE_ACCOUNT_TOKEN={0}", "ops_eyJ" + tok(300, B64))
tp("cloudflare-token", "CLOUDFLARE_API_TOKEN={0}", tok(40, URLSAFE))
tp("snyk-token", "SNYK_TOKEN={0}", uuid())

# --- private keys --------------------------------------------------------------------------------
pem = "\n".join(tok(64, B64) for _ in range(6))
tp("private-key", "-----BEGIN RSA PRIVATE KEY-----\n{0}\n-----END RSA PRIVATE KEY-----", pem)
tp("private-key", "key.pem:\n-----BEGIN EC PRIVATE KEY-----\n{0}\n-----END EC PRIVATE KEY-----\n"
   "done", tok(64, B64) + "\n" + tok(40, B64))
tp("private-key", "-----BEGIN OPENSSH PRIVATE KEY-----\n{0}\n-----END OPENSSH PRIVATE KEY-----",
   "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" + tok(200, B64))
tp("private-key", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{0}\n=abcd\n"
   "-----END PGP PRIVATE KEY BLOCK-----", "lQOYBF" + tok(300, B64))
tp("private-key", "-----BEGIN ENCRYPTED PRIVATE KEY-----\n{0}\n(paste cut off here", tok(64, B64))
tp("private-key", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: ci\n"
   "Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAAI\nPrivate-Lines: 1\n{0}\nPrivate-MAC: {1}",
   tok(44, B64), tok(64, HEX))
tp("private-key", "the key body was {0}", "b3BlbnNzaC1rZXktdjEAAAAA" + tok(80, B64))
tp("age-secret-key", "# created: 2026-01-01\nAGE_KEY={0}", "AGE-SECRET-KEY-1" + tok(58, BECH32))
tp("age-secret-key", "sops uses {0}", "AGE-SECRET-KEY-1" + tok(58, BECH32))

# --- JWTs ----------------------------------------------------------------------------------------
jwt = ("eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJhZGEiLCJleHAiOjE3MDAwMDAwMDB9."
       + tok(86, URLSAFE))
tp("jwt", "id_token={0}", jwt)
tp("jwt", "Cookie: access={0}; path=/", jwt)
tp("jwt", "the JWT {0} decoded to sub=ada", jwt)

# --- URLs, connection strings ------------------------------------------------------------------
tp("url-password", "DATABASE_URL=postgres://app:{0}@db.internal:5432/app", tok(16))
tp("url-password", "redis://:{0}@cache:6379/0", tok(12))
# a password with dots reads like an attribute reference anywhere else (issue 27)
tp("url-password", "DATABASE_URL=postgres://app:{0}@db.internal:5432/app", "pa.ss.word")
tp("url-password", "mysql://root:{0}@localhost/shop", "hunter2.x")
tp("url-password", "REDIS_URL=rediss://default:{0}@eu1.upstash.io:6379", tok(32))
tp("url-password", "mongodb+srv://svc:{0}@cluster0.abcd.mongodb.net/?retryWrites=true", tok(14))
tp("url-password", "amqp://worker:{0}@rabbit:5672/%2f", tok(10))
tp("url-password", "pip install --index-url https://ci:{0}@pypi.acme.io/simple pkg", tok(20))
tp("url-password", "ftp://deploy:{0}@files.acme.io/upload", "p@ss:" + tok(8).replace("@", "a"))
tp("url-password", "jdbc:mysql://root:{0}@localhost:3306/shop", tok(10))
tp("url-password", "smtp://mailer:{0}@smtp.acme.io:587", tok(12, _LOWER + _DIGITS))
tp("secret-assignment", "Server=tcp:acme.database.windows.net,1433;Database=shop;User ID=app;"
   "Password={0};Encrypt=True;", tok(14) + "!")
tp("secret-assignment", "jdbc:postgresql://db:5432/app?user=app&password={0}&ssl=true", tok(12))
tp("secret-assignment", "host=db port=5432 dbname=app user=app password={0} sslmode=require",
   tok(12))
tp("secret-assignment", "Data Source=db;Initial Catalog=app;User Id=sa;Pwd={0};", tok(10) + "#")

# --- headers and commands ----------------------------------------------------------------------
tp("authorization-header", "Authorization: Bearer {0}", tok(40, URLSAFE))
tp("authorization-header", "curl -H \"Authorization: token {0}\" https://api.acme.io", tok(40, HEX))
tp("authorization-header", "Proxy-Authorization: Basic {0}",
   base64.b64encode(b"proxy:" + tok(12).encode()).decode())
tp("authorization-header", "headers = {{'Authorization': 'Bearer {0}'}}", tok(32))
tp("authorization-header",
   "127.0.0.1 - - [03/Dec/2026] \"GET /x HTTP/1.1\" 200 authorization=Bearer {0}", tok(30))
tp("bearer-token", "then call it with bearer {0} and it works", tok(36, URLSAFE))
tp("curl-user", "curl -u admin:{0} https://jenkins.acme.io/api/json", tok(12))
tp("curl-user", "curl --user 'ci:{0}' https://nexus.acme.io", tok(12) + "$!")
tp("curl-user", "curl -sS -u \"deploy:{0}\" -X POST https://x", tok(14))
tp("cli-password", "mysql -h db -u root -p{0} shop < dump.sql", tok(12))
tp("cli-password", "mysqldump --password={0} --all-databases", tok(12))
tp("cli-password", "sshpass -p {0} ssh root@10.0.0.5", tok(10))
tp("cli-password", "redis-cli -h cache -a {0} ping", tok(16))
tp("cli-password", "mongosh \"mongodb://db:27017/app\" -u admin -p {0}", tok(14))
tp("cli-password", "sqlcmd -S db -U sa -P {0} -Q \"select 1\"", tok(12) + "!")
tp("cli-password", "ldapsearch -x -D cn=admin,dc=acme -w {0} -b dc=acme", tok(12))
tp("cli-password", "smbclient //files/share -U deploy%{0}", tok(12))
tp("cli-password", "openssl pkcs12 -export -in c.pem -passout pass:{0} -out c.p12", tok(12))
tp("netrc-password", "machine api.heroku.com\n  login ada@example.com\n  password {0}\n", uuid())
tp("github-token", "machine github.com login ada password {0}", "ghp_" + tok(36))
tp("netrc-password", "machine ci.acme.io login deploy password {0}", tok(14))
tp("session-cookie", "Set-Cookie: sessionid={0}; HttpOnly; Path=/", tok(32, _LOWER + _DIGITS))
tp("secret-assignment", "psql with PGPASSWORD={0} psql -h db", tok(12))
tp("secret-assignment", "X-Api-Key: {0}", tok(32))
tp("secret-assignment", "X-Auth-Token: {0}", tok(40, HEX))

# --- key = value in every dialect --------------------------------------------------------------
tp("secret-assignment", "DB_PASSWORD={0}", "hunter2!" + tok(4))
tp("secret-assignment", "export API_KEY='{0}'", tok(24))
tp("secret-assignment", "set -x SECRET_TOKEN {0}", tok(20))
tp("secret-assignment", "$env:CLIENT_SECRET = \"{0}\"", tok(20))
tp("secret-assignment", "password: {0}\nport: 5432", "Tr0ub4dor&3" + tok(3))
tp("secret-assignment", "  smtp_password: \"{0}\"\n", tok(12) + " " + tok(4))
tp("secret-assignment", "[database]\npassword = \"{0}\"\n", tok(16))
tp("secret-assignment", "[smtp]\nsecret = {0}\n", tok(16))
tp("secret-assignment", '{{"db": {{"user": "app", "password": "{0}"}}}}', tok(12))
tp("secret-assignment", '{{\\"api_key\\": \\"{0}\\"}}', tok(24))
tp("secret-assignment", "spring.datasource.password={0}", tok(12))
tp("secret-assignment", "client_secret => '{0}'", tok(30))
tp("secret-assignment", "Password := \"{0}\"", tok(14))
tp("secret-assignment", "const config = {{ password: \"{0}\" }};", tok(10))
tp("secret-assignment", "conn = connect(host='db', password='{0}')", tok(10))
tp("secret-assignment", "<password>{0}</password>", tok(14))
tp("secret-assignment", "./deploy --api-token {0} --env prod", tok(28))
tp("secret-assignment", "terraform apply -var 'db_password={0}'", tok(16))
tp("secret-assignment", "encryption_key: {0}", tok(44, B64))
tp("secret-assignment", "SIGNING_KEY={0}", tok(48, B64))
tp("secret-assignment", "the password is {0}", "Spring2026!" + tok(2))
tp("secret-assignment", "passphrase: \"{0}\"", "correct horse " + tok(8))
tp("secret-assignment", "  - name: DB_PASS\n    value: x\nDB_PASS={0}", tok(12))
tp("secret-assignment", "salt = {0}", tok(32, B64))
tp("secret-assignment", "JWT_SECRET={0}", tok(64, HEX))
tp("secret-assignment", "SECRET_KEY = '{0}'",
   "k#9)w@^x+2!b$" + tok(20, _LOWER + _DIGITS) + "(-_=+)")
tp("ctxlake-token", "curl 'https://ctx.example/api/v1/fleets/acme/claims?q={0}'",
   "ctx_" + tok(43, _LOWER + _DIGITS + "_-"))
tp("django-secret-key", "SECRET_KEY = 'django-insecure-{0}'",
   "".join(_rng.choice(_LOWER + _DIGITS + "!@#$%^&*(-_=+)") for _ in range(50)))
tp("secret-assignment", "SECRET_KEY={0}",
   "v&3x" + "".join(_rng.choice(_LOWER + _DIGITS + "!@#$%^&*(-_=+)") for _ in range(46)))
tp("secret-assignment", "kubectl create secret generic db --from-literal=password={0}", tok(14))
tp("secret-assignment", "ENV ADMIN_PASSWORD {0}", tok(12))

# --- hidden characters -------------------------------------------------------------------------
_gh = "ghp_" + tok(36)
tp("github-token", "token " + _gh[:12] + "\u200b" + _gh[12:] + " pasted", _gh[:12], _gh[12:])
_ak = "AKIA" + tok(16, _UPPER + _DIGITS)
tp("aws-access-key", "id " + _ak[:8] + "\u202e" + _ak[8:], _ak[:8] + "\u202e" + _ak[8:], _ak[8:])
_sk = "sk-ant-api03-" + tok(60, URLSAFE)
tp("anthropic-key", "key=" + "\u2060".join(_sk[i:i + 10] for i in range(0, len(_sk), 10)),
   *[_sk[i:i + 10] for i in range(10, len(_sk) - 10, 10)])
_pw = tok(14)
tp("url-password", "postgres://app:" + _pw[:5] + "\ufeff" + _pw[5:] + "@db/app", _pw[5:])

# --- handoff notes and logs ---------------------------------------------------------------------
tp("github-token", "Handoff: CI is red because the deploy job's token {0} expired; rotate it.",
   "ghp_" + tok(36))
tp("stripe-key", "2026-12-03T10:00:00Z ERROR stripe.error.AuthenticationError: Invalid API Key "
   "provided: {0}", "sk_live_" + tok(24))
tp("openai-key", "Traceback (most recent call last):\n  File \"app.py\", line 3\n"
   "openai.AuthenticationError: Incorrect API key provided: {0}", "sk-proj-" + tok(48, URLSAFE))
tp("url-password", "GET /health 200 upstream=http://svc:{0}@10.0.0.7:8080/", tok(16))
tp("secret-assignment", "POST /login?user=ada&password={0} HTTP/1.1", tok(10))
tp("secret-assignment", "GET /api/v1/fleets/demo/claims/search?q=x&access_token={0} 200",
   tok(40, URLSAFE))


# --- one for each remaining rule of the table ---------------------------------------------------
tp("private-key", "key body: {0}", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSj" + tok(200, B64))
tp("age-secret-key", "identity {0}", "AGE-PLUGIN-YUBIKEY-1" + tok(40, BECH32))
tp("jwt", "token (base64): {0}", "ZXlKaGJHY2lPaUpJVXpJMU5pSjku" + tok(60, B64))
tp("gitlab-token", "Cookie: _gitlab_session={0}", tok(32, _LOWER + _DIGITS))
tp("atlassian-token", "confluence_token = {0}", tok(24))
tp("together-key", "TOGETHER_API_KEY={0}", tok(64, HEX))
tp("slack-token", "config token {0}", "xoxe.xoxp-1-" + tok(160, ALNUM))
tp("discord-token", "DISCORD_BOT_TOKEN={0}", "M" + tok(25, URLSAFE) + "." + tok(6, URLSAFE) + "."
   + tok(38, URLSAFE))
tp("zapier-webhook", "zap: {0}",
   "https://hooks.zapier.com/hooks/catch/123456/" + tok(7, _LOWER + _DIGITS) + "/")
tp("braintree-token", "BRAINTREE_TOKEN={0}", "access_token$production$" + tok(16, _LOWER + _DIGITS)
   + "$" + tok(32, HEX))
tp("postmark-token", "postmark server token: {0}", uuid())
tp("sentry-token", "sentry auth: {0}", tok(64, HEX))
tp("honeycomb-key", "HONEYCOMB_API_KEY={0}", tok(32))
tp("render-key", "RENDER_API_KEY={0}", "rnd_" + tok(32))
tp("railway-token", "RAILWAY_TOKEN={0}", uuid())
tp("cloudflare-token", "origin ca key {0}", "v1.0-" + tok(24, HEX) + "-" + tok(146, HEX))
tp("linear-key", "linear client secret: {0}", tok(32, HEX))
tp("ngrok-token", "ngrok config add-authtoken {0}", "2" + tok(26) + "_" + tok(21))
tp("circleci-token", "CIRCLE_TOKEN={0}", "CCIPAT_" + tok(22) + "_" + tok(40, HEX))
tp("buildkite-token", "BUILDKITE_API_TOKEN={0}", "bkua_" + tok(40, HEX))
tp("codecov-token", "CODECOV_TOKEN={0}", uuid())
tp("mapbox-token", "MAPBOX_SECRET={0}", "sk.eyJ1IjoiYWRhIiwiYSI6Im" + tok(40, URLSAFE) + "."
   + tok(22, URLSAFE))
tp("facebook-token", "fb access token {0}", "EAAB" + tok(120))


# --- FALSE POSITIVES ----------------------------------------------------------------------------
FALSE_POSITIVES: list[str] = [
    # empty, references and placeholders
    "API_KEY=",
    "API_KEY=\nDEBUG=1",
    "export GITHUB_TOKEN=$GITHUB_TOKEN",
    "export OPENAI_API_KEY=${OPENAI_API_KEY}",
    "DB_PASSWORD=${DB_PASSWORD:-}",
    "password: ${{ secrets.DB_PASSWORD }}",
    "token: {{ vault_token }}",
    "api_key = os.environ[\"API_KEY\"]",
    "api_key = os.environ.get(\"API_KEY\")",
    "token = os.getenv('GITHUB_TOKEN')",
    "const key = process.env.STRIPE_SECRET_KEY;",
    "password = get_secret(\"db\")",
    "secret = settings.SECRET_KEY",
    "client_secret = config.client_secret",
    "api_key: str = Field(default=None)",
    "password: Optional[str] = None",
    "self.token = token",
    "token = None",
    "password = ''",
    "API_KEY=<your-api-key>",
    "api_key: <YOUR_API_KEY>",
    "Authorization: Bearer <your-token-here>",
    "Authorization: Bearer $CTXLAKE_TOKEN",
    "Authorization: Bearer ${TOKEN}",
    "headers['Authorization'] = f'Bearer {token}'",
    "curl -H \"Authorization: Bearer $(gh auth token)\" https://api.github.com",
    "OPENAI_API_KEY=sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "password: changeme",
    "password=changeme",
    "secret: '***'",
    "password: ********",
    "token: null",
    "password: required",
    "the password field is required",
    "api_key: your-api-key-here",
    "STRIPE_KEY=replace-me",
    "SECRET_KEY=insert-your-secret-here",
    "postgres://user:password@localhost:5432/db",
    "postgres://user:${DB_PASSWORD}@db:5432/app",
    "redis://localhost:6379/0",
    "mysql -u root -p shop",
    "mongosh --host db -u admin -p",
    "openssl pkcs12 -export -passout pass: -out c.p12",
    "openssl req -passin env:KEY_PASS -in req.pem",
    "docker login -u ada --password-stdin ghcr.io",
    "echo \"$CR_PAT\" | docker login ghcr.io -u ada --password-stdin",
    "curl -u \"$USER:$TOKEN\" https://x",
    "password: !vault |",
    "DB_PASSWORD=/run/secrets/db_password",
    "password_file: /etc/app/password.txt",
    "secretName: db-credentials",
    "valueFrom:\n  secretKeyRef:\n    name: db\n    key: password",
    "kind: Secret",
    "TOKEN_URL=https://oauth2.googleapis.com/token",
    "token_type: bearer",
    "set max_tokens=4096 and token_count=12",
    "max_tokens: 1024",
    "password_hash: pbkdf2_sha256$600000$abc$def",
    "the password is required for login",
    "the token is stored in the keychain",
    "Bearer tokens expire after an hour",
    "use bearer auth for the admin endpoints",
    "authorization: required for every endpoint",
    "secret: true",
    "pass: 3 tests, fail: 0",
    "bypass=true",
    "author=ada wrote it",
    "cache_key=user:42:profile",
    "sort_key: created_at",
    "key: release-2024-notes",
    "primary_key=True",
    "api_key_header = 'X-API-Key'",
    "AUTH_HEADER_NAME=Authorization",
    # hashes, ids, UUIDs, base64 of non-secrets
    "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed it",
    "merge 3f2a9c1 into main",
    "request id 123e4567-e89b-12d3-a456-426614174000",
    "trace_id=4bf92f3577b34da6a3ce929d0e0e4736",
    "sha256:07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "sha256sum: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "md5: d41d8cd98f00b204e9800998ecf8427e",
    "etag: \"33a64df551425fcc55e4d42a148795d9f25f89d4\"",
    "integrity: sha512-9a0f2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b",
    "image: ghcr.io/acme/app@sha256:"
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    "encoded SGVsbG8sIHdvcmxkISBUaGlzIGlzIGp1c3QgdGV4dC4= is hello world",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ada@laptop",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUb3\n-----END CERTIFICATE-----",
    "look for '-----BEGIN RSA PRIVATE KEY-----' headers in the repo",
    "AKIA is the prefix of AWS access keys",
    "the key id looks like AKIA followed by 16 characters",
    "arn:aws:iam::123456789012:role/ci-deploy",
    "i-0abcd1234efgh5678 in us-east-1",
    "AIza is how Google API keys start",
    "ghp_ tokens are classic PATs; github_pat_ ones are fine-grained",
    "sk-learn is a library; skip-ahead",
    "xoxb- tokens are bot tokens",
    "npm_config_cache=/tmp/npm",
    "hf_hub_download(repo_id='bert-base-uncased')",
    "gsk_ prefix for Groq",
    "dapi prefix for Databricks PATs",
    # paths, URLs, code, prose
    "ordinary words, numbers 12345 and paths src/app.py survive",
    "src/components/auth/TokenRefreshButton.tsx",
    "mcp_bridge/contract/redact_rules.py",
    "/home/ada/.config/gcloud/application_default_credentials.json",
    "C:\\Users\\ada\\.aws\\credentials",
    "https://example.com/path?page=2",
    "https://docs.github.com/en/authentication/keeping-your-account-and-data-secure",
    "https://user@example.com/repo.git",
    "git@github.com:org/repo.git",
    "ssh://git@github.com:22/org/repo.git",
    "http://localhost:8000/admin/",
    "See https://api.slack.com/authentication/token-types for xoxb/xoxp",
    "def rotate_token(token: str) -> str:",
    "if not password: raise ValueError('password required')",
    "for key, value in os.environ.items():",
    "access_key_id = creds.access_key",
    "token = request.headers.get('Authorization', '').removeprefix('Bearer ')",
    "password = getpass.getpass()",
    "secret = secrets.token_urlsafe(32)",
    "SECRET_KEY = get_random_secret_key()",
    "api_key = API_KEY",
    "password = user_password",
    "Handoff: rotated the Stripe key in the vault; CI reads STRIPE_SECRET_KEY from it now.",
    "The AWS credentials live in ~/.aws/credentials; never paste them here.",
    "Next: ask ops for a Databricks token with read scope.",
    "Set the JWT_SECRET in the environment, not in settings.py",
    "2026-12-03 10:00:00 INFO token refreshed for agent ada (expires in 3600s)",
    "GET /api/v1/fleets/demo/claims/search?q=redis+timeout 200 1234",
    "the secret sauce is caching",
    "Passwords must be at least 12 characters",
    "keyboard shortcuts: ctrl+k",
    "monkeypatch.setattr(redact, '_scan', boom)",
]

# Contexts a caller may wrap an assignment in as JSON (the key carries the meaning).
JSON_SHAPED_SECRETS: list[tuple[dict, str]] = [
    (lambda v: ({"db": {"password": v}}, v))("hunter2!x9"),
    (lambda v: ({"env": {"STRIPE_SECRET_KEY": v}}, v))("rk_live_" + tok(24)),
    (lambda v: ({"config": [{"name": "api", "api_key": v}]}, v))("k" + tok(20)),
    (lambda v: ({"credentials": {"client_secret": v}}, v))(tok(30)),
    (lambda v: ({"smtp": {"PASS": v}}, v))(tok(12)),
    (lambda v: ({"headers": {"X-Api-Key": v}}, v))(tok(32)),
]
JSON_SHAPED_SURVIVORS = [
    {"password": ""},
    {"password": "${DB_PASSWORD}"},
    {"api_key": "<your-key>"},
    {"token": None},
    {"secret": True},
    {"password_hash": "pbkdf2_sha256$1$a$b"},
    {"max_tokens": 4096},
    {"token_type": "bearer"},
]
