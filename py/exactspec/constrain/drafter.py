"""Grammar-forced drafting: the proposals of one JSON-mode round.

Where the grammar admits exactly one continuation (`{"name": "`, `", "age": `, a closing bracket) its tokens are
proposed by the grammar itself, any number of them, with no draft pass; at the other ("free") positions the base
drafter (draft model or n-gram) proposes under the grammar's mask, at most k of them per round. With a draft model,
a free position first looks the text so far up for a continuation (a match of 2+ tokens; extraction copies values
from the prompt) and proposes it without a draft pass; the draft model fills the rest. Copies and lookups count
toward k like the base drafter's proposals (letting them run past k was measured and not kept: README, JSON mode).
The champion verifies all of them in one pass,
each row under the grammar's mask at that position, so greedy / coupled / rejection stay exact: a forced proposal is
a point mass (q(x) = 1) like an n-gram proposal, and a draft-model proposal was drawn from its masked distribution,
which is what its q row holds.

Inside a string value, a free position first tries a copy: the value's text so far (2+ bytes; 1 where the prompt
has it at a word start) is looked up in the text before the value (the prompt above all), and the tokens of what followed it there are proposed, as the
tokenizer writes them (`copy_tokens`). Token n-grams miss such copies: the prompt writes ` Lena Fischer` where the
answer writes `"Lena Fischer"`, so the tokens differ although the text is the same.

The copies go further (`copy_proposal`, measured on the DEV prompts of bench/json_mode/dev_prompts.json first, then
on the workload's: README, JSON mode):
- a value's first byte is enough to copy from the prompt's text (at a word start there: the model writes `L` +
  `ena` where the prompt has ` Lena`); a longer needle is also found with ASCII case ignored, at a word start (the
  prompt's `treasurer` continues the answer's `Tr`), its later words then capitalised (`north gate` -> `North Gate`);
- where the copy's source ends (a line end, a quote), the copy proposes the value's closing quote and what the
  grammar forces after it (`Fischer",` as ` Fischer` + `",`; `"}` where a string is the document's last value),
  less a sentence's full stop when the value was copied from inside the sentence (`Tromso.` -> `"Tromso"`);
- the first token of the document's first string value is the prompt text's first word (after the prompt's last
  `: `, as in `Extract {...} from: Lena Fischer, 34`), as the tokenizer writes it;
- a number value copies a number of the prompt (the first one, in the prompt's order, that the answer has not
  written as a value: not part of a word like K7 or INV-2291, nor of a time like 14:05), and once it is complete
  the byte that ends it where only one can, with what the grammar forces after that (`, "city": "`).

A forced byte string is proposed as the tokenizer writes it (`Constraint.forced`); the model mostly writes text that
way. When it does not (it prefers another split), the proposal is rejected at that row and the champion's own token
is emitted instead: speed is lost, never exactness. Such a split is learned (`learn_split`: SmolLM2 writes `{"` as
`{` + `"`): later forced runs propose that token as the champion wrote it. The splits are kept for the answer, or,
passed in by the session, for every answer of that champion.
"""
from __future__ import annotations

import re

import numpy as np

from ..drafters.ngram import NgramDrafter
from .grammar import NUMBER_BYTES

MAX_ROUND = 32           # proposals per round at most (forced + free): rows of one verify pass
COPY_MIN_BYTES = 2       # a string value's text so far must be this long before it is looked up anywhere for a copy
                         # (shorter: only at a word start in the prompt)
COPY_MAX_BYTES = 48      # the most text of a copy tokenised per lookup


def copy_tokens(vocab, text: bytes, quote_at: int, prompt_end: int | None = None, close=None) -> list[int]:
    """Token ids continuing the string value that opens at text[quote_at] ('"') by a copy: the value's bytes so
    far, text[quote_at + 1:], found in text[:quote_at] (`_find_copy`; a value's first byte only in the prompt,
    text[:prompt_end]); what followed them there, up to a newline or a quote (COPY_MAX_BYTES at most), whole
    characters only, tokenised as the tokenizer writes it. Where the source ends there (a newline, a quote, the end
    of the text), close(tail) -> the tokens of the tail, the value's closing quote and what the grammar forces after
    it, or None, are proposed instead: the model writes `Fischer",` as ` Fischer` + `",`
    and `stapler.",` with `.",` as one token; a full stop that ends the source is left out unless the copy started
    a sentence (`_sentence_start`: the model writes `"Tromso"` from `... based in Tromso.`). [] when nothing is
    found."""
    needle = text[quote_at + 1:]
    if not needle or b'"' in needle or b"\\" in needle:
        return []
    at = _find_copy(text, needle, quote_at, quote_at if prompt_end is None else min(prompt_end, quote_at))
    if at < 0:
        return []
    src = text[at + len(needle):quote_at]
    if text[at:at + 1].islower() and needle[:1].isupper():     # found with case ignored: the answer capitalises
        src = re.sub(rb"(?<= )[a-z]", lambda m: m.group(0).upper(), needle[-1:] + src)[1:]   # `north gate` -> `North Gate`
    tail = src[:COPY_MAX_BYTES]
    ends = len(src) <= COPY_MAX_BYTES
    for stop in (b"\n", b'"'):
        cut = tail.find(stop)
        if cut >= 0:
            tail, ends = tail[:cut], True
    if ends and tail.endswith(b".") and not _sentence_start(text, at):
        tail = tail[:-1]            # a value copied from inside a sentence ends before the sentence's full stop
    while tail:
        try:
            tail.decode("utf-8")
            break
        except UnicodeDecodeError:
            tail, ends = tail[:-1], False
    return ((close(tail) if close is not None and ends else None) or []) or (_tokens(vocab, tail) if tail else [])


def _sentence_start(text: bytes, at: int) -> bool:
    """Whether text[at] starts a sentence: after a full stop, a question or exclamation mark, a colon or a line
    end (quotes, brackets and spaces between), or at the text's start."""
    before = text[:at].rstrip(b" \t\"'([")
    return not before or before[-1:] in (b".", b"!", b"?", b":", b"\n")


def _find_copy(text: bytes, needle: bytes, end: int, prompt_end: int) -> int:
    """Where the copy of `needle` starts in text[:end], -1 if none: its last occurrence at a word start (the byte
    before it not a letter or digit); a needle under COPY_MIN_BYTES only so and only in text[:prompt_end]; a longer
    one else its last occurrence anywhere, then at a word start with ASCII case ignored (the prompt writes
    `treasurer`, the answer `Treasurer`)."""
    def at_word(hay, nl, stop):
        at = hay.rfind(nl, 0, stop)
        while at >= 0:
            if at == 0 or not chr(hay[at - 1]).isalnum():
                return at
            at = hay.rfind(nl, 0, at + len(nl) - 1)
        return -1
    if len(needle) < COPY_MIN_BYTES:
        return at_word(text, needle, prompt_end)
    at = at_word(text, needle, end)
    if at >= 0:
        return at
    at = text.rfind(needle, 0, end)
    return at if at >= 0 else at_word(text.lower(), needle.lower(), end)


# a number of the prompt: digits with an optional fraction, not part of a word (K7, 14C, INV-2291) or of another
# number's digits
_PROMPT_NUMBER = re.compile(rb"(?<![A-Za-z0-9_.\-])(?<![0-9]:)-?[0-9]+(?:\.[0-9]+)?(?![A-Za-z0-9_])(?!:[0-9])")
_NUMBER_SO_FAR = re.compile(rb"-?[0-9]*(?:\.[0-9]*)?$")


def number_tokens(constraint, text: bytes, state, prompt_end: int) -> list[int]:
    """Token ids continuing a number value by a copy of a number of the prompt (text[:prompt_end]): the first
    one, in the prompt's order, that starts with the number written so far and that the answer has not written as
    a value yet (extraction writes the prompt's numbers in order); once it is complete, the byte that ends the
    number where the grammar allows only one (`,`, `}` or `]`) and what it forces after that, tokenised together
    (`},` in `3}, {"`). [] when the grammar takes no digit here, or nothing fits."""
    g = constraint.grammar
    so_far = _NUMBER_SO_FAR.search(text).group(0)
    if so_far and not so_far[-1:].isdigit() and so_far != b"-":
        return []
    if not so_far and text[-1:] and text[-1] in NUMBER_BYTES:   # inside a number's fraction or exponent
        return []
    if not so_far and g.step(state, 0x31) is None:          # not a number's start
        return []
    head = text[prompt_end:len(text) - len(so_far)]
    for m in _PROMPT_NUMBER.finditer(text[:prompt_end]):
        v = m.group(0)
        if not v.startswith(so_far) or re.search(rb"(?:: |\[|, |:|,)" + re.escape(v) + rb"(?![0-9.])", head):
            continue
        rest = v[len(so_far):]
        if not rest:
            ends = [b for b in g.next_bytes(state) if b not in NUMBER_BYTES]
            if len(ends) != 1:
                return []
            return _closing(constraint, bytes(ends), g.step(state, ends[0]))
        return _tokens(constraint.vocab, rest)
    return []


_WORD = re.compile(rb"[A-Za-z0-9][^\s\"]*")             # a word of the prompt's text: from a letter or digit on
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"(:?)')           # a complete JSON string, and the ':' of a key


def _no_string_value(answer: bytes) -> bool:
    """True when every complete string of `answer` (JSON text) is a key (followed by ':')."""
    return all(m.group(1) for m in _STRING.finditer(answer))


def first_word_tokens(vocab, text: bytes, prompt_end: int) -> list[int]:
    """Token ids of the first word of the prompt's text (text[:prompt_end] after its last ': ', where extraction
    prompts put the text: `Extract {...} from: Lena Fischer, 34`), as the tokenizer writes it at a string value's
    start, while the answer (text[prompt_end:]) has not written that word: a document's first string value most
    often starts with it. [] when there is none."""
    colon = text.rfind(b": ", 0, prompt_end)
    if colon < 0:
        return []
    m = _WORD.search(text, colon + 2, prompt_end)
    if m is None:
        return []
    word = m.group(0).rstrip(b".,;:!?)'")
    if not word or word in text[prompt_end:]:
        return []
    return _tokens(vocab, word)


def _tokens(vocab, data: bytes) -> list[int]:
    """data as the tokenizer writes it (else the longest match over the vocabulary); [] if it cannot."""
    if vocab.encode is not None:
        try:
            ids = [int(i) for i in vocab.encode(data.decode("utf-8"))]
        except UnicodeDecodeError:
            ids = []
        if ids and b"".join(vocab.token_bytes[i] or b"\x00" for i in ids) == data:
            return ids
    return vocab.longest_match(data) or []


def token_text(vocab, toks) -> bytes:
    """The bytes of `toks` as copies read them: special tokens as line ends (a copy stops at a message's end)."""
    tb = vocab.token_bytes
    return b"".join(tb[t] or b"\n" for t in toks)


def copy_proposal(constraint, toks, state, prompt_len: int | None = None, text: bytes | None = None,
                  prompt_bytes: int | None = None) -> list[int]:
    """The copy's first token at a free position after `toks` (prompt + answer so far, the prompt its first
    prompt_len tokens) in grammar `state`, or []: inside a string value the copy of the prompt's text
    (`copy_tokens`), at or inside a number the copy of a prompt's number (`number_tokens`). GrammarDrafter's, and
    bench json_mode's simulation of it. text / prompt_bytes: token_text(toks) and the length of its prompt's part,
    where the caller keeps them."""
    if text is None:
        text = token_text(constraint.vocab, toks)
    pe = prompt_bytes if prompt_bytes is not None else \
        len(text) if prompt_len is None else len(token_text(constraint.vocab, toks[:prompt_len]))
    if not constraint.in_free_string(state):
        return number_tokens(constraint, text, state, pe)[:1]
    q = text.rfind(b'"')
    if q < 0:
        return []
    if q == len(text) - 1:                     # a value's first token: the first one's is the text's first word
        return first_word_tokens(constraint.vocab, text, pe)[:1] if _no_string_value(text[pe:q]) else []
    g = constraint.grammar

    def close(tail: bytes):
        after = g.walk(state, tail + b'"')
        return None if after is None else _closing(constraint, tail + b'"', after)
    return copy_tokens(constraint.vocab, text, q, pe, close)[:1]


def _forced_bytes(constraint, state) -> tuple[bytes, tuple]:
    """The bytes the grammar forces from `state` (Constraint.forced's, as far as they go) and the state after them."""
    data = b"".join(constraint.vocab.token_bytes[t] for t in constraint.forced(state))
    return data, constraint.grammar.walk(state, data)


def _closing(constraint, end: bytes, after) -> list[int]:
    """Tokens of `end` (the bytes that end a value) and what the grammar forces after them, less a last token that
    what may follow could merge with (`}` before `,` or `]`: the model writes `},` or `}]`, which is not known)."""
    more, last = _forced_bytes(constraint, after)
    data = end + more
    ids = _tokens(constraint.vocab, data)
    if not ids or last is None:
        return ids
    return constraint.unmerge_tail(data, last, ids)


def learn_split(vocab, splits: dict, proposed: int, written: int) -> None:
    """A forced proposal `proposed` was rejected and the champion wrote `written`: when written's bytes are a proper
    prefix of proposed's, the champion splits that token: splits[proposed] = (written, the rest as the tokenizer
    writes it). Anything else (a token that runs past it, or other bytes) teaches nothing."""
    tb = vocab.token_bytes
    a, b = tb[proposed], tb[written]
    if not a or not b or len(b) >= len(a) or not a.startswith(b) or proposed in splits:
        return
    rest = vocab.longest_match(a[len(b):]) or []
    if b"".join(tb[i] for i in rest) == a[len(b):]:
        splits[proposed] = (int(written),) + tuple(int(i) for i in rest)


def apply_splits(splits: dict, ids) -> list[int]:
    """Forced ids with every learned split applied."""
    out: list[int] = []
    for t in ids:
        out.extend(splits.get(t, (t,)))
    return out


class GrammarDrafter:
    """Wraps a drafter for JSON mode. The decode loop calls begin_round(state, budget, cap) before propose() and
    reads states / forced_flags after it."""

    name = "grammar"
    lookup_with_draft = True     # the text-so-far lookup before the draft model (bench json_mode turns it off to
                                 # measure the draft model alone)

    def __init__(self, base, constraint, use_forced: bool = True, splits: dict | None = None):
        self.base = base
        self.splits = {} if splits is None else splits   # token -> the tokens the champion writes it as (learned)
        self._proposals: list = []                       # (g,) this round's proposals
        self.constraint = constraint
        self.use_forced = use_forced
        # with a draft model, a free position first looks for a continuation in the text so far (extraction copies
        # from the prompt): a match of 2+ tokens is proposed without a draft pass
        self.lookup = NgramDrafter(max_ngram=3, min_ngram=2) \
            if self.lookup_with_draft and getattr(base, "draft", None) is not None else None
        self.copy = self.lookup is not None or getattr(base, "draft", None) is None   # copies of the prompt's text
        self.states: list = []           # (g + 1,) grammar state before each proposal, and after the last
        self.forced_flags: list = []     # (g,) True where the grammar forced the proposal
        self._budget = None
        self._cap = 0
        self.prompt_len = None           # the prompt's tokens: the sequence of the first round (copy_proposal's)
        self._text = ([], b"", 0)        # (tokens, token_text of them, bytes of the prompt's part): the last round's

    @property
    def passes(self) -> int:
        return getattr(self.base, "passes", 0)

    def max_proposals(self, seq_len_now: int) -> int:
        """Forced tokens need no drafter, but a draft model's cache takes them in too: its room bounds a round."""
        return self.base.max_proposals(seq_len_now) if getattr(self.base, "draft", None) is not None else 1 << 30

    def update(self, committed_len: int) -> None:
        self.base.update(committed_len)

    def begin_round(self, state, budget: int, cap: int) -> None:
        """state: the grammar state after the committed tokens; budget: tokens that may still be emitted; cap: the
        most proposals this round may carry (context, budget, draft cache)."""
        self.states = [state]
        self.forced_flags = []
        self._proposals = []
        self._budget = budget
        self._cap = max(0, min(cap, MAX_ROUND))

    def masks(self, n_rows: int) -> list:
        """(n_rows,) masks (vocab,) bool of the verify rows: row i is the position after proposals[:i]."""
        c = self.constraint
        return [c.mask(self.states[i], self._budget - i) for i in range(n_rows)]

    @property
    def budget(self) -> int:
        """The tokens this round may still emit (begin_round's budget): row i has budget - i left."""
        return self._budget

    async def propose(self, seq, k, pick):
        """(proposals, q_rows): at most k free proposals plus the forced ones, up to the round's cap. q_rows
        (g, vocab) float64 when the base drafter sampled (rejection mode; forced and n-gram rows are point masses),
        else None."""
        c = self.constraint
        vocab_eos = set(c.vocab.eos_ids)
        proposals: list[int] = []
        q_rows: list = []
        n_free = 0
        sampled = False
        if self.prompt_len is None:
            self.prompt_len = len(seq)
        seq_text, prompt_bytes = self._seq_text(seq)
        while len(proposals) < self._cap:
            st = self.states[-1]
            if c.done(st):
                break
            if self.use_forced:
                forced = apply_splits(self.splits, c.forced(st))[: self._cap - len(proposals)]
                if forced:
                    for tok in forced:
                        st = c.advance(st, tok)
                        proposals.append(tok)
                        q_rows.append(None)
                        self.states.append(st)
                        self.forced_flags.append(True)
                    continue
            # k free proposals a round, copies and lookups included: letting them run past k raised tau (to 3.39 at
            # 2k, 3.58 unbounded, from 3.17) but cost tok/s on the CPU (JSON combined vs plain 0.94x / 0.82x, from
            # 1.24x): the extra verify rows cost more than they save there (README, JSON mode)
            if n_free >= k:
                break
            budget = self._budget - len(proposals)
            mask = None              # (vocab,) bool, made only for a drafter that picks from a row under it

            def allowed(t: int, st=st, budget=budget) -> bool:
                """mask[t]: the token's bytes walked through the grammar (Constraint.allows), or the mask at hand."""
                return bool(mask[t]) if mask is not None else c.allows(st, t, budget)
            ctx = list(seq) + proposals              # the sequence this proposal continues
            toks = copy_proposal(c, ctx, st, self.prompt_len, seq_text + token_text(c.vocab, proposals),
                                 prompt_bytes) if self.copy else []
            if not toks or not allowed(toks[0]):
                toks = self.lookup.lookup(ctx, 1) if self.lookup is not None else []
            q = None
            if not toks or not allowed(toks[0]):
                mask = c.mask(st, budget)
                toks, q = await self.base.propose(ctx, 1, lambda row, t, m=mask: pick(row, t, m))
            if not toks:
                break
            tok = int(toks[0])
            if not allowed(tok):                                   # an n-gram continuation the grammar refuses
                break
            nxt = c.advance(st, tok)
            proposals.append(tok)
            q_rows.append(None if q is None else np.asarray(q)[0])
            sampled = sampled or q is not None
            self.forced_flags.append(False)
            self.states.append(nxt)
            n_free += 1
            if tok in vocab_eos:
                break
        self._proposals = list(proposals)
        if not sampled:
            return proposals, None
        V = c.vocab.vocab_size
        rows = np.zeros((len(proposals), V), dtype=np.float64)     # (g, vocab)
        for i, (tok, q) in enumerate(zip(proposals, q_rows)):
            if q is None:
                rows[i, tok] = 1.0
            else:
                rows[i] = q
        return proposals, rows

    def _seq_text(self, seq) -> tuple[bytes, int]:
        """token_text(seq) and its prompt part's length, extended from the last round's where seq continues it (an
        answer's sequence only grows between rounds)."""
        toks, text, pb = self._text
        n = len(toks)
        if n and len(seq) >= n and list(seq[:n]) == toks:
            text += token_text(self.constraint.vocab, seq[n:])
        else:
            text = token_text(self.constraint.vocab, seq)
            pb = len(token_text(self.constraint.vocab, seq[:self.prompt_len]))
        self._text = (list(seq), text, pb)
        return text, pb

    def state_after(self, n_accepted: int, token: int):
        """The grammar state after the accepted proposals and the champion's own token (a forced proposal it wrote
        otherwise teaches its split: learn_split)."""
        if n_accepted < len(self._proposals) and self.forced_flags[n_accepted]:
            learn_split(self.constraint.vocab, self.splits, self._proposals[n_accepted], token)
        return self.constraint.advance(self.states[n_accepted], token)
