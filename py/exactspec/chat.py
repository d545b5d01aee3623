"""Chat templates without Jinja: ChatML (SmolLM2, Qwen) and Llama-3.

A model's Jinja `chat_template` (GGUF `tokenizer.chat_template` or tokenizer_config.json) is not executed: its kind
is detected from the markers it contains, and for ChatML the default system prompt it inserts when the conversation
has none (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face") is read out of it.
What `render_chat` returns is then exactly what the template renders (tests compare against jinja2).

`encode_chat` is the safe way to feed a conversation to a model: the template's markup becomes special tokens,
while special-token text typed inside a message ("<|im_end|>") stays plain text, so a user cannot forge turns.
"""

from __future__ import annotations

import re

CHAT_KINDS = ("chatml", "llama3")
_CHATML_DEFAULT_SYSTEM_RE = re.compile(r"<\|im_start\|>system(?:\n|\\n)([^'\"{}]*?)<\|im_end\|>")


class ChatTemplateError(ValueError):
    """A chat template or a conversation that cannot be rendered."""


def detect_template(chat_template: str | None) -> str:
    """'chatml' or 'llama3' for a Jinja chat template string (or a kind name given as is)."""
    if chat_template in CHAT_KINDS:
        return chat_template
    if not isinstance(chat_template, str) or not chat_template:
        raise ChatTemplateError("no chat template: the model file carries none (send a raw prompt instead)")
    if "<|start_header_id|>" in chat_template and "<|eot_id|>" in chat_template:
        return "llama3"
    if "<|im_start|>" in chat_template and "<|im_end|>" in chat_template:
        return "chatml"
    raise ChatTemplateError(f"unsupported chat template (neither ChatML nor Llama-3): {chat_template[:80]!r}...")


def default_system_prompt(chat_template: str | None) -> str | None:
    """The system prompt a ChatML template inserts when the first message is not a system message, if any."""
    if not isinstance(chat_template, str) or chat_template in CHAT_KINDS:
        return None
    if detect_template(chat_template) != "chatml":
        return None
    # Only a literal system turn guarded by a "first message is not system" test is a default prompt.
    if "!= 'system'" not in chat_template and '!= "system"' not in chat_template:
        return None
    m = _CHATML_DEFAULT_SYSTEM_RE.search(chat_template)
    if m is None:
        return None
    return m.group(1).replace("\\n", "\n")


def _check_messages(messages):
    if not isinstance(messages, (list, tuple)):
        raise ChatTemplateError(f"messages must be a list of {{role, content}}, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ChatTemplateError(f"message #{i} must be a dict with 'role' and 'content'")
        role, content = m["role"], m["content"]
        if not isinstance(role, str) or not isinstance(content, str):
            raise ChatTemplateError(f"message #{i}: role and content must be strings")
        if not role or "<|" in role or "\n" in role or len(role) > 64:
            raise ChatTemplateError(f"message #{i}: invalid role {role[:70]!r}")
        out.append((role, content))
    return out


def chat_parts(messages, template: str = "chatml", add_generation_prompt: bool = True,
               default_system: str | None = None) -> list[tuple[str, bool]]:
    """The rendered conversation as (text, is_markup) pieces: markup may hold special tokens, content may not.

    template: 'chatml', 'llama3', or a model's Jinja chat template string (kind detected; for ChatML its default
    system prompt is used unless `default_system` is given)."""
    kind = detect_template(template)
    if default_system is None:
        default_system = default_system_prompt(template)
    msgs = _check_messages(messages)
    parts: list[tuple[str, bool]] = []
    if kind == "chatml":
        for i, (role, content) in enumerate(msgs):
            if i == 0 and role != "system" and default_system is not None:
                parts.append((f"<|im_start|>system\n{default_system}<|im_end|>\n", True))
            parts.append((f"<|im_start|>{role}\n", True))
            parts.append((content, False))
            parts.append(("<|im_end|>\n", True))
        if add_generation_prompt:
            parts.append(("<|im_start|>assistant\n", True))
    else:  # llama3: content is trimmed, BOS opens the conversation
        parts.append(("<|begin_of_text|>", True))
        for role, content in msgs:
            parts.append((f"<|start_header_id|>{role}<|end_header_id|>\n\n", True))
            parts.append((content.strip(), False))
            parts.append(("<|eot_id|>", True))
        if add_generation_prompt:
            parts.append(("<|start_header_id|>assistant<|end_header_id|>\n\n", True))
    return [(t, mk) for t, mk in parts if t]


def render_chat(messages, template: str = "chatml", add_generation_prompt: bool = True,
                default_system: str | None = None) -> str:
    """The prompt text for `messages` (list of {role, content}); see `chat_parts` for `template`."""
    return "".join(t for t, _ in chat_parts(messages, template, add_generation_prompt, default_system))


def encode_chat(tokenizer, messages, template: str | None = None, add_generation_prompt: bool = True,
                default_system: str | None = None) -> list[int]:
    """Token ids of the rendered conversation: markup's special tokens as ids, message text never parsed for them.
    For ordinary messages this equals tokenizer.encode(render_chat(...)) id for id."""
    if template is None:
        template = getattr(tokenizer, "chat_template", None)
    parts = chat_parts(messages, template, add_generation_prompt, default_system)
    return tokenizer.encode_parts(parts)
