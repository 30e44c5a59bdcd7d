"""The instruction screen's rules as data, read by the engine in screen.py. Stdlib only.

Each rule names one way text speaks *to an agent* rather than about the work: a chat role
marker, an order to drop earlier instructions, an order aimed at the agent's tools, a
request to send secrets somewhere, a hidden carrier. Like the redactor's table
(redact_rules.py), each rule has an id, the reason a moderator reads, a pattern, and
lower-case keywords that must appear before the pattern is tried — the union of all
keywords is the guard that lets most engineering text skip the table altogether.

The patterns are written to stay linear: bounded repeats only, no nested quantifiers, so
a hostile megabyte costs time in proportion to its length (tests/mcp_bridge/test_screen.py
bounds it per KiB). Ordinary engineering prose is the other half of the contract:
procedures ("Run `make lint` before pushing"), claims about agents and tools
("memory_propose refuses a status field"), YAML (`user: postgres`) must pass;
bench/screen_bench.py measures both halves on data this project did not write.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from mcp_bridge.contract.redact_rules import LazyPattern


class Rule(NamedTuple):
    id: str
    reason: str
    pattern: LazyPattern
    keywords: tuple[str, ...]


def _r(id: str, reason: str, pattern: str, keywords: tuple[str, ...] | str,
       flags: int = re.IGNORECASE) -> Rule:
    kw = (keywords,) if isinstance(keywords, str) else keywords
    return Rule(id, reason, LazyPattern(pattern, flags), kw)


# Words that introduce what the text wants from its reader.
_PREV = (r"(?:previous|prior|preceding|above|earlier|former|foregoing|original|initial|old|"
         r"existing|system|developer|your|all|any|every)")
_ORDERS = (r"(?:instructions?|prompts?|directives?|directions?|rules|guidelines|guardrails|"
           r"commands?|orders|context|constraints|restrictions|polic(?:y|ies)|programming|"
           r"messages?|tasks?|guidance|safeguards|filters)")
_DROP = r"(?:ignore|disregard|forget|override|overrule|bypass|discard|abandon|drop|neglect|skip)"
_W = r"[\w'’-]{1,30}"  # one word
_GAP = rf"(?:\s+{_W}){{0,3}}?\s+"  # up to three words between

RULES: tuple[Rule, ...] = (
    # --- role markers: text pretending to be a turn of the conversation -------------------
    _r("chat-template-token", "a chat-template token (<|im_start|>, [INST], <<SYS>>)",
       r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|"
       r"end_header_id|begin_of_text)\|>|\[/?INST\]|<</?SYS>>|<start_of_turn>|<end_of_turn>",
       ("<|", "inst]", "<<sys", "_of_turn>")),
    _r("role-marker", "a role marker (SYSTEM:, ASSISTANT:) addressing the model",
       r"(?<![\w.-])(?:SYSTEM|ASSISTANT|DEVELOPER)(?:\s+(?:PROMPT|MESSAGE|NOTE|OVERRIDE|"
       r"INSTRUCTIONS?))?\s*:(?!:)|\[(?:SYSTEM|ASSISTANT|DEVELOPER)(?:\s+\w{1,12})?\]",
       ("system", "assistant", "developer"), flags=0),
    _r("role-tag", "a role tag (<system>, </user>, ### System:) addressing the model",
       r"</?(?:system|assistant|developer|system[_-]prompt|instructions?)>|"
       r"(?m:^)[ \t]*(?:#{1,4}|\*\*)[ \t]*(?:system|assistant|developer)"
       r"(?:[ \t]+(?:prompt|message|instructions?))?[ \t]*:?[ \t]*(?:\*\*)?[ \t]*:?[ \t]*(?=\n|$)|"
       r"(?-i:(?m:^)[ \t]*(?:Human|Assistant)[ \t]*:[ \t]+\S)",
       ("system", "assistant", "developer", "instruction", "human")),
    # --- orders to drop what the agent was told ---------------------------------------------
    _r("override", "an order to ignore or replace the agent's earlier instructions",
       rf"\b{_DROP}{_GAP}{_PREV}\b(?:\s+{_W}){{0,2}}?\s+{_ORDERS}\b|"
       rf"\b{_DROP}\s+(?:all|everything|anything)\s+(?:you\s+(?:were|have\s+been)\s+"
       rf"(?:told|given|instructed)|(?:above|before|previously|prior|said|written))|"
       rf"\b{_DROP}\s+(?:all\s+|any\s+)?(?:instructions|prompts|directives)\b|"
       rf"\b{_DROP}\s+the\s+(?:above|following|rest\s+of\s+(?:this|the)\s+(?:data|text|"
       rf"document|input|page|file|message))\b",
       ("ignor", "disregard", "forget", "overrid", "overrul", "bypass", "discard", "abandon",
        "drop", "neglect", "skip")),
    _r("new-instructions", "text announcing new instructions or a new role for the agent",
       r"\b(?:new|updated|revised|real|actual|true|secret|hidden|additional|important|urgent)"
       r"\s+(?:system\s+)?(?:instructions?|directives?|orders|task|objective|goal|"
       r"system\s+prompt)\s*(?:for\s+(?:you|the\s+(?:ai|assistant|agent|model))\s*)?[:!]|"
       r"\byour\s+(?:new|real|actual|true|only|primary)\s+(?:task|goal|objective|purpose|"
       r"instructions?|job|role|mission)\s+(?:is|are)\b|"
       r"\bfrom\s+now\s+on,?\s+(?:you|the\s+(?:ai|assistant|agent|model))\b|"
       r"\byou\s+are\s+now\s+(?:an?|the|in|my|called|named|known\s+as|DAN|free|"
       r"unrestricted|jailbroken|unfiltered)\b|\byou\s+are\s+no\s+longer\s+(?:bound|"
       r"restricted|limited|an?)\b|"
       r"\b(?:pretend|imagine)\s+(?:that\s+)?you\s+(?:are|were|have)\b|"
       r"\bact\s+as\s+(?:if\s+you|an?\s+(?:unrestricted|unfiltered|evil|jailbroken))|\b(?:DAN|god|jailbreak|unrestricted)\s+mode\b|"
       r"\b(?:enable|enabled|activate|activated|in|with|enter)\s+developer\s+mode\b|"
       r"\bdeveloper\s+mode\s+(?:enabled|activated|on)\b|"
       r"\bjailbr(?:oken|eak)\b|\bdo\s+anything\s+now\b",
       ("new", "updated", "revised", "real", "actual", "true", "secret", "hidden",
        "additional", "important", "urgent", "your", "from now", "you are", "pretend",
        "imagine", "act as", "mode", "jailbr", "anything now")),
    _r("answer-order", "an order dictating what the model answers or writes",
       r"\b(?:just|only)\s+(?:print|say|output|reply|respond|answer|write|repeat)\b"
       r"[^.\n]{0,20}?[\"“']|"
       r"\bif\s+(?:the\s+)?(?:user|human|anyone|someone)\s+asks?\b[^.\n]{0,60}?\b(?:reply|"
       r"respond|answer|say|tell|output|print|report)\b|"
       r"\bif\s+(?:questioned|asked)\b,?\s+(?:say|report|reply|respond|answer|tell)\b|"
       r"\b(?:reply|respond)\s+(?:with\s+)?only\s+(?:with\s+)?the\s+following\b|"
       r"\brepeat\s+the\s+following\s+(?:sentence|text|words)\b|"
       r"\bwrite\s+(?:one|a|an)\s+(?:[\w-]{1,20}\s+){0,2}?(?:sentence|paragraph|poem|"
       r"story|tweet|joke)\s+(?:about|on|saying)\b",
       ("print", "say", "output", "reply", "respond", "answer", "write", "repeat", "asks",
        "questioned", "asked")),
    _r("conceal", "an order to hide something from the user or the operator",
       r"\b(?:do\s+not|don'?t|never|without)\s+(?:tell(?:ing)?|inform(?:ing)?|"
       r"mention(?:ing)?|notify(?:ing)?|alert(?:ing)?|reveal(?:ing)?\s+(?:this\s+)?to|"
       r"ask(?:ing)?|asking\s+for\s+confirmation\s+from|let(?:ting)?\s+(?:the\s+)?"
       r"(?:user|human|operator)\s+know)\s+(?:the\s+|your\s+)?(?:user|human|operator|"
       r"developer|person|moderator|anyone)\b",
       ("tell", "inform", "mention", "notify", "alert", "reveal", "ask", "know")),
    # --- orders aimed at the agent's tools -----------------------------------------------
    _r("tool-order", "an order aimed at the agent's tools (propose the claim, call the tool)",
       r"(?:^|[.!?:;>\n]|\b(?:now|then|please|immediately|must|should|to)\b)\s*"
       r"(?:propose|file|submit|record|add|store|save|create|write)\s+(?:the|this|a|these|"
       r"following)\s+(?:following\s+)?(?:new\s+)?(?:claims?|memor(?:y|ies)|facts?|"
       r"lessons?)\b\s*(?::|[\"“‘`]|'(?!s\b))|"
       r"\b(?:call|invoke|use|run|trigger|execute)\s+(?:the\s+)?(?:memory_propose|"
       r"memory_search|fleet_handoff|fleet_claim|fleet_release|fleet_status|"
       r"memory_timeline|fleet_history|[\w-]{1,40}\s+tool)\b[^.\n]{0,80}?\b(?:with|to|and|"
       r"now|immediately|passing)\b|"
       r"\b(?:run|execute|paste)\s+(?:this|the\s+following|these|the\s+command\s+below|"
       r"it)\s+(?:command|script|code|snippet|line)?\s*(?:now|immediately|first|"
       r"without|in\s+(?:your|the)\s+(?:terminal|shell))|"
       r"\b(?:run|execute)\s+the\s+following\s+(?:command|script|code)s?\b",
       ("propose", "file", "submit", "record", "add", "store", "save", "create", "write",
        "call", "invoke", "use", "run", "trigger", "execute", "paste")),
    _r("pipe-to-shell", "a download piped into a shell (curl … | sh)",
       r"\b(?:curl|wget|iwr|irm|Invoke-WebRequest|Invoke-RestMethod)\b[^|\n]{0,300}\|\s*"
       r"(?:sudo\s+)?(?:ba|z|da|k|fi)?sh\b|"
       r"\b(?:curl|wget)\b[^|\n]{0,300}\|\s*(?:sudo\s+)?(?:python3?|perl|ruby|node|iex)\b",
       ("curl", "wget", "iwr", "irm", "invoke-")),
    # --- exfiltration bait -------------------------------------------------------------------
    _r("exfiltration", "a request to send secrets or environment data somewhere",
       r"\b(?:send|post|upload|forward|exfiltrate|email|transmit|leak|share|copy|paste|"
       r"submit|include|append|encode)\b[^\n]{0,80}?(?:\b(?:secrets?|tokens?|credentials?|"
       r"api[_ -]?keys?|passwords?|env(?:ironment)?\s+variables|ssh\s+keys?|"
       r"private\s+keys?|id_rsa|cookies?|session\s+ids?|aws_\w+|"
       r"conversation|chat\s+history|system\s+prompt)\b|\.env\b|\.aws/|\.ssh/)"
       r"[^\n]{0,80}?(?:\bto\b|\binto\b|"
       r"\bat\b|\bvia\b|\bin\b)\s*[^\s.]{0,40}?(?:https?://|\bwebhook|[\w-]+\.(?:com|net|"
       r"org|io|xyz|ru|cn|site|top|dev|app)\b|\bmy\s+(?:server|endpoint|url)|"
       r"\b(?:this|that|the\s+following)\s+(?:url|address|endpoint|server|webhook))|"
       r"https?://\S{1,200}[?&][\w-]{1,30}=(?:\$\{?|%24)\w{0,40}(?:TOKEN|KEY|SECRET|"
       r"PASSWORD|PASS|CRED|AUTH)|"
       r"\b(?:curl|wget)\b[^\n]{0,200}(?:-d|--data(?:-\w+)?|-F|-T|--upload-file)\s+"
       r"[^\n]{0,80}(?:\$\(\s*(?:env|printenv|cat\s+[~/.$]\S*(?:ssh|aws|\.env|netrc|"
       r"credentials|secrets?))|@?~?/?\.ssh/|@\.env\b|\$\{?\w*(?:TOKEN|KEY|SECRET))|"
       r"!\[[^\]\n]{0,80}\]\(https?://[^)\s]{1,200}[?&][\w-]{1,30}=[^)\s]{0,40}"
       r"(?:\{|\$|%7B)",
       ("send", "post", "upload", "forward", "exfiltrat", "email", "transmit", "leak",
        "share", "copy", "paste", "submit", "include", "append", "encode", "http", "curl",
        "wget", "![")),
    # --- hidden carriers ------------------------------------------------------------------
    _r("hidden-comment", "an HTML or markdown comment that talks to the agent",
       r"<!--(?:(?!-->|<!--)[\s\S]){0,2000}?\b(?:ai|llm|assistant|agent|claude|codex|"
       r"instructions?|prompt|you\s+(?:must|should|are|will)|ignore\s+(?:all|any|the|"
       r"previous|prior|above|your))\b"
       r"(?:(?!-->|<!--)[\s\S]){0,2000}?-->|"
       r"(?m:^)\[//\]:\s*#\s*[(\"'][^\n]{0,500}\b(?:ai|llm|assistant|agent|"
       r"instructions?|prompt|you\s+(?:must|should)|ignore\s+(?:all|any|the|previous))\b"
       r"[^\n]{0,500}",
       ("<!--", "[//]:")),
    _r("hidden-audience", "text addressed to models and hidden from people",
       r"\b(?:visible|readable)\s+(?:only\s+)?to\s+(?:the\s+)?(?:llms?|ai|models?|"
       r"language\s+models?)\b|"
       r"\baddressed\s+to\s+(?:the\s+)?(?:llms?|ai|models?|agents?|assistants?)\b|"
       r"\b(?:invisible|hidden)\s+(?:to|from)\s+(?:the\s+)?(?:humans?|people|users?|"
       r"readers?|reviewers?)\b",
       ("visible", "readable", "addressed", "invisible", "hidden")),
    _r("hidden-tag-text", "text hidden in invisible Unicode tag characters",
       r"[\U000E0020-\U000E007E]{4,}", (), flags=0),  # no keyword: always tried
)

#: A base64 or hex run long enough to hide a sentence; the engine decodes it and screens
#: what it says (one level deep), flagging the blob with the decoded text's reason.
BLOB = LazyPattern(r"(?<![A-Za-z0-9+/=_-])(?:[A-Za-z0-9+/]{4}){10,}(?:[A-Za-z0-9+/]{2}==|"
                   r"[A-Za-z0-9+/]{3}=)?(?![A-Za-z0-9+/=_-])|"
                   r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){20,}(?![0-9A-Fa-f])")
BLOB_MIN_CHARS = 40

#: Every rule's keywords, for the guard in front of the table (keyword-less rules always run).
KEYWORDS: tuple[str, ...] = tuple(sorted({k for rule in RULES for k in rule.keywords}))
