"""The WebGPU engine on the foreign draft's shape (exactspec_train.foreign.DRAFT: 4 layers, 256 wide, 4 heads of 64,
FFN 1024, 32,000 tokens, Q8_0): batch-invariant and equal to the numpy reference, so the page can run the Llama-2-
vocabulary draft on the engine while the bridge runs in Python. Random weights of that shape (same speed, same
kernels); Node + Dawn (tests/gpu/test_gpu_engine.py's harness)."""
from test_gpu_engine import check_engine


def test_foreign_draft_shape_invariance_parity(tmp_path):
    from exactspec.micro import micro_config, write_micro_gguf
    from exactspec_train.foreign import DRAFT
    cfg = micro_config(vocab_size=32000, **{k: DRAFT[k] for k in ("dim", "hidden_dim", "n_layers", "n_heads",
                                                                   "n_kv_heads", "head_dim")})
    p = tmp_path / "foreign-shape.gguf"
    write_micro_gguf(p, cfg, seed=9, tensor_type="Q8_0", with_tokenizer=False)
    _full, diff, _info = check_engine(p, n=12)
    assert diff < 1e-3
