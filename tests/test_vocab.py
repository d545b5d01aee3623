"""Bridges between vocabularies (exactspec.vocab) on real tokenizers: SmolLM2's (the champion's GGUF), Llama-2
(SentencePiece, 32,000), Llama-3 and Qwen3 (byte-level): id maps, intersections, the draft's view of the committed
text, and SLEM's boundaries on text with spaces, digits, emoji, CJK, code and partial UTF-8."""
import random

import numpy as np
import pytest

from exactspec.vocab import (HOLD, BridgeError, DraftView, IdMap, Intersection, SlemAligner, compare, resolve,
                             stable_units, text_units)
from test_tokenizer import make_corpus
from vocab_toys import real_tokenizer

PAIRS = ["llama2", "llama3", "qwen3"]
TOKENIZERS = ["smollm2"] + PAIRS


@pytest.fixture(scope="module")
def smol():
    return real_tokenizer("smollm2")


def specials_of(tok, n=8):
    return [tok.added_content(i) for i in sorted(tok.special_ids)][:n]


# ---------------------------------------------------------------------------------------------------- pieces
@pytest.mark.parametrize("name", TOKENIZERS)
def test_encode_pieces_join_to_encode(name):
    """Pieces cover the text in order and their ids are encode()'s (NFC aside: Qwen3 normalises, pieces do not)."""
    tok = real_tokenizer(name)
    corpus = make_corpus(31, specials_of(tok), n=1500)
    if tok.normalizer == "nfc":
        import unicodedata
        corpus = [s for s in corpus if unicodedata.normalize("NFC", s) == s]
    for s in corpus:
        for allow in (False, True):
            pieces = tok.encode_pieces(s, allow_special=allow)
            assert [i for _a, _b, ids in pieces for i in ids] == tok.encode(s, allow_special=allow), s
            assert "".join(s[a:b] for a, b, _ in pieces) == s
            assert all(p[1] == q[0] for p, q in zip(pieces, pieces[1:]))


@pytest.mark.parametrize("name", TOKENIZERS)
def test_tokenizer_survives_a_gguf_round_trip(name, tmp_path):
    """gguf_metadata() writes what from_gguf reads back to the same tokenizer (SentencePiece as model 'llama' with
    scores, token types and merges): the foreign draft's GGUF carries its tokenizer this way."""
    from exactspec.formats.gguf import write_gguf
    from exactspec.tokenizer import Tokenizer
    tok = real_tokenizer(name)
    if tok.normalizer is not None:
        with pytest.raises(Exception, match="normalizer"):
            tok.gguf_metadata()
        return
    write_gguf(tmp_path / "t.gguf", {"general.architecture": "llama", **tok.gguf_metadata()}, {})
    back = Tokenizer.from_gguf(tmp_path / "t.gguf")
    assert (back.kind, back.bos_id, back.eos_id, back.add_bos, back.special_ids) == \
        (tok.kind, tok.bos_id, tok.eos_id, tok.add_bos, tok.special_ids)
    for s in make_corpus(9, specials_of(tok), n=600):
        assert back.encode(s) == tok.encode(s), s


# ---------------------------------------------------------------------------------------------------- stability
ALPHABET = ["'", "s", "R", "e", "l", "ll", "re", " ", "  ", "\n", "\r", "\t", "1", "2", "a", "\u0301", "\U0001F642", ".", "<",
            "|im_end|>", "\u00a0", "\u4e2d", "\u0416", "def", "(", "x", ")"]


def _check_stable(tok, texts, hold, rng, cuts=6):
    """For every text and cut: the tokens of the units stable_units calls stable must begin the tokenisation of the
    whole text (so no appended text changes them). Returns the number of violations."""
    bad = 0
    for s in texts:
        data = s.encode("utf-8")
        for allow in (False, True):
            full = [i for u in text_units(tok, data, True, allow) for i in u[2]]
            for _ in range(cuts):
                cut = rng.randrange(0, len(data) + 1)
                pre = data[:cut]
                u = text_units(tok, pre, True, allow)
                n = stable_units(tok, u, pre, hold, allow)
                ids = [i for x in u[:n] for i in x[2]]
                bad += full[:len(ids)] != ids
    return bad


@pytest.mark.parametrize("name", TOKENIZERS)
def test_stable_prefix_never_changes_with_more_text(name):
    """SLEM proposes only tokens that more text cannot change. Checked on the tokenizer test corpus (scripts, CJK,
    emoji with ZWJ, digits, whitespace runs, code, specials, random bytes) and on random strings over a small
    alphabet of the tricky cases (contractions, combining marks, \\r\\n runs, special-token prefixes), cut at random
    BYTES (partial UTF-8 included). One piece less held back breaks it: the rule is as tight as it is safe."""
    tok = real_tokenizer(name)
    rng = random.Random(3)
    corpus = make_corpus(11, specials_of(tok), n=700)
    tricky = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 7))) for _ in range(4000)]
    assert _check_stable(tok, corpus, HOLD[tok.kind], rng) == 0
    assert _check_stable(tok, tricky, HOLD[tok.kind], rng, cuts=2) == 0
    assert _check_stable(tok, tricky, HOLD[tok.kind] - 1, rng, cuts=2) > 0


def test_units_of_partial_utf8_and_invalid_bytes(smol):
    llama2 = real_tokenizer("llama2")
    for tok in (smol, llama2):
        data = "ok \U0001F642".encode()[:-2] + b"\xff" * 0            # an emoji cut after 2 of its 4 bytes
        u = text_units(tok, data, True, False)
        assert u[-1][3] == "partial" and u[-1][:2] == (len(data) - 2, len(data))
        assert b"".join(tok.token_bytes(i) for i in u[-1][2]) == data[-2:]
        assert stable_units(tok, u, data, HOLD[tok.kind], False) < len(u) - 1   # the piece before it is held too
        bad = b"a\xffb"                                                 # an invalid byte mid-text: a unit of its own
        u = text_units(tok, bad, False, False)
        assert [x[3] for x in u] == ["text", "byte", "text"]
        if tok.byte_token(0xFF) is not None:
            assert b"".join(tok.token_bytes(i) for x in u for i in x[2]) == bad


# ---------------------------------------------------------------------------------------------------- compat, maps
def test_compare_names_what_differs(smol):
    c = compare(smol, real_tokenizer("llama2"))
    text = "\n".join(c.differences)
    for needle in ("byte-level BPE", "SentencePiece", "normalisation", "special tokens", "<|im_start|>", "BOS",
                   "EOS", "chat template", "byte strings in both"):
        assert needle in text, needle
    assert not c.same and not c.remap and c.shared > 20_000
    assert (c.auto("coupled"), c.auto("greedy"), c.auto("rejection")) == ("slem", "slem", "tli")
    same = compare(smol, smol)
    assert same.same and same.auto("coupled") == "none" and same.differences == []
    perm = compare(smol, real_tokenizer("smollm2-permuted"))
    assert perm.remap and perm.auto("rejection") == "remap"
    from exactspec.backend import ModelConfig
    a = ModelConfig(1, 1, 1, 1, 1, 1, 49152, 8192)
    b = ModelConfig(1, 1, 1, 1, 1, 1, 32000, 2048)
    assert any("context length: champion 8192, draft 2048" in d for d in compare(smol, real_tokenizer("llama2"),
                                                                                   a, b).differences)
    with pytest.raises(BridgeError, match="remap needs the same token strings"):
        resolve("remap", c, "coupled")
    with pytest.raises(BridgeError, match="must be one of"):
        resolve("fast", c, "coupled")
    assert resolve("tli", c, "coupled") == "tli" and resolve("slem", perm, "rejection") == "slem"


def test_remap_is_a_bijection_checked_both_ways(smol):
    perm = real_tokenizer("smollm2-permuted")
    m = IdMap(smol, perm, smol.vocab_size, perm.vocab_size)
    ids = np.arange(smol.vocab_size)
    assert np.array_equal(m.to_champion[m.to_draft[ids]], ids)
    for i in range(0, smol.vocab_size, 97):
        assert perm.token_bytes(int(m.to_draft[i])) == smol.token_bytes(i)
    row = np.random.default_rng(0).standard_normal(perm.vocab_size)
    assert np.array_equal(m.champion_row(row, smol.vocab_size), row[m.to_draft])
    text = "It's 2024: naïve café — 日本語 🙂 def f(x): return x**2"
    assert [int(m.to_draft[i]) for i in smol.encode(text)] == perm.encode(text)
    # a token on one side only rules the map out
    from exactspec.tokenizer import Tokenizer
    from exactspec.formats.gguf import GGUFValue
    md = {k: (v.value if isinstance(v, GGUFValue) else v) for k, v in perm.gguf_metadata().items()}
    md["tokenizer.ggml.tokens"] = md["tokenizer.ggml.tokens"] + ["<extra>"]
    md["tokenizer.ggml.token_type"] = md["tokenizer.ggml.token_type"] + [3]
    extra = Tokenizer.from_gguf_metadata(md)
    assert not compare(smol, extra).remap and compare(smol, extra).draft_only == 1
    with pytest.raises(BridgeError, match="one side only"):
        IdMap(smol, extra, smol.vocab_size, extra.vocab_size)


@pytest.mark.parametrize("name", PAIRS)
def test_intersection_maps_equal_byte_strings(smol, name):
    tok = real_tokenizer(name)
    inter = Intersection(smol, tok, smol.vocab_size, tok.vocab_size)
    for c, d in zip(inter.c_ids[::37], inter.d_ids[::37]):
        assert smol.token_bytes(int(c)) == tok.token_bytes(int(d))
    shared = {smol.token_bytes(i) for i in range(smol.vocab_size) if smol.added_content(i) is None} & \
        {tok.token_bytes(i) for i in range(tok.vocab_size) if tok.added_content(i) is None}
    specials = set(specials_of(smol, 100)) & set(specials_of(tok, 1000))
    assert inter.size == len(shared) + len(specials)
    # the champion row is the log of the restricted draft distribution, pushed forward (renormalised by softmax)
    row = np.random.default_rng(1).standard_normal(tok.vocab_size) * 3
    z = inter.champion_row(row, smol.vocab_size)
    p = np.exp(row - row.max())
    q = np.zeros(smol.vocab_size)
    np.add.at(q, inter.c_ids, p[inter.d_ids])
    got = np.exp(z - z[np.isfinite(z)].max())
    assert np.allclose(got / got.sum(), q / q.sum(), atol=1e-12)
    assert np.isinf(z[np.setdiff1d(np.arange(smol.vocab_size), inter.c_ids)]).all()
    c = int(inter.c_ids[np.argmax(inter.c_ids > 300)])
    assert tok.token_bytes(inter.draft_token(c, row)) == smol.token_bytes(c)
    assert 0 < inter.outside_mass(row) < 1


# ---------------------------------------------------------------------------------------------------- the view
def _walk(smol, rng, base, steps=200):
    """Committed champion sequences as a conversation grows: real text, random ids (partial UTF-8, specials, junk),
    and rollbacks (a regenerated answer)."""
    seq = list(smol.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
    for _ in range(steps):
        r = rng.random()
        if r < 0.6:
            i = rng.randrange(len(base) - 5)
            seq += base[i:i + rng.randint(1, 4)]
        elif r < 0.75:
            seq += [rng.randrange(smol.vocab_size) for _ in range(rng.randint(1, 3))]
        elif r < 0.85:
            seq = seq[:max(1, len(seq) - rng.randint(1, 6))]
        else:
            seq.append(rng.choice([0, 1, 2]))
        yield seq


@pytest.mark.parametrize("name", TOKENIZERS)
def test_view_is_the_committed_text_retokenised_incrementally(smol, name):
    """The draft's view: exactly the committed bytes (BOS, SentencePiece's one prepended space, and bytes the
    draft's vocabulary lacks aside), the draft's own tokenisation of them, and the incremental view (anchors kept
    across calls, rolled back with the sequence) equal to one computed from scratch every time."""
    tok = real_tokenizer(name)
    base = smol.encode("A list:\n- it's 12.5% off\n- naïve café 🙂 日本語\n\tdef f(x): return x ** 2\n" * 3)
    view = DraftView(smol, tok)
    rng = random.Random(7)
    missing = set(tok.missing_bytes)
    for seq in _walk(smol, rng, base):
        got = view.ids(seq)
        assert got == DraftView(smol, tok).ids(seq)
        if tok.add_bos:
            assert got[0] == tok.bos_id
            got = got[1:]
        vb = b"".join(tok.token_bytes(i) for i in got)
        cb = b"".join(smol.token_bytes(i) for i in seq)
        if tok.kind == "spm":
            assert vb.startswith(b" ")
            vb = vb[1:]
        if not missing:
            assert vb == cb
        else:
            assert vb == bytes(b for b in cb if b not in missing)
    assert len(view._anchors) > 20


def test_view_of_shared_specials_uses_the_drafts_own(smol):
    qwen = real_tokenizer("qwen3")
    seq = smol.encode("<|im_start|>user\nhi<|im_end|>\n")
    ids = DraftView(smol, qwen).ids(seq)
    assert ids[0] == qwen.id_of("<|im_start|>") and qwen.id_of("<|im_end|>") in ids
    ids = DraftView(smol, real_tokenizer("llama2")).ids(seq)            # llama2 has no such token: text
    assert ids[0] == 1 and real_tokenizer("llama2").decode(ids[1:]) == "<|im_start|>user\nhi<|im_end|>\n"


# ---------------------------------------------------------------------------------------------------- slem
def test_slem_proposes_the_stable_champion_tokens(smol):
    committed = smol.encode("<|im_start|>assistant\nThe capital of France")
    al = SlemAligner(smol)
    al.begin(committed)
    props, held = al.proposals(b" is Paris. It is")
    full = smol.encode("<|im_start|>assistant\nThe capital of France is Paris. It is")
    assert props == full[len(committed):len(full) - 2] and held == 2     # " It", " is" held back
    props, held = al.proposals(b" is Paris. It is", final=True)
    assert props == full[len(committed):] and held == 0
    # a committed token the new text continues (" the" + "re"): the new text starts mid-piece, tokenised alone
    committed = smol.encode("look at the")
    al.begin(committed)
    props, _ = al.proposals(b"re is a cat on the mat")
    assert smol.decode(props).startswith("re is a")
    assert al.fallbacks == 1
    # partial UTF-8 from the draft: nothing past the last whole piece before it
    al.begin(smol.encode("Smile"))
    props, held = al.proposals(" for the camera \U0001F642".encode()[:-1])
    assert smol.decode(props) == " for the" and held > 0
    # a special token written as text by the draft becomes the champion's special, and is final once complete
    al.begin(smol.encode("<|im_start|>assistant\nDone"))
    props, _ = al.proposals(b".<|im_end|>\n<|im_")
    assert props == smol.encode(".<|im_end|>")
    props, _ = al.proposals(b". <|im_e")
    assert props == []                                                 # " <|im_e" may still become the special


@pytest.mark.parametrize("name", PAIRS)
def test_slem_proposals_spell_the_draft_text(smol, name):
    """Whatever the draft writes (its own tokens, cut anywhere), the proposals spell a prefix of that text, right
    after the committed text: the champion sees the draft's string, in its own tokens."""
    tok = real_tokenizer(name)
    rng = random.Random(11)
    texts = make_corpus(5, [], n=300)
    al = SlemAligner(smol)
    for s in texts:
        c_ids = smol.encode("Q: " + s[: len(s) // 2])
        draft_ids = tok.encode(s[len(s) // 2:], allow_special=False)
        cut = rng.randrange(len(draft_ids) + 1)
        new = b"".join(tok.token_bytes(i) for i in draft_ids[:cut])
        if tok.kind == "spm" and new.startswith(b" "):
            new = new[1:]                                             # its own prepended space
        al.begin(c_ids)
        props, _ = al.proposals(new)
        assert new.startswith(b"".join(smol.token_bytes(i) for i in props)), (s, props)
