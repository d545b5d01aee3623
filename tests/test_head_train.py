"""Training the draft head (exactspec_train.head, torch): its training-time-test levels are exactly the drafter's
chains, its chain evaluation equals the numpy simulation, its export loads in the numpy head with the same rows."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from exactspec.drafters.head import HeadConfig, HeadModel, random_head_weights  # noqa: E402
from exactspec.micro import micro_config  # noqa: E402
from exactspec.reference import ReferenceModel  # noqa: E402
from exactspec_train.accept import FeatureSource, head_chains  # noqa: E402
from exactspec_train.head import HeadNet, chain_runs, export_head, frequency_subset, head_loss  # noqa: E402
from test_head import champion_weights, near_oracle_head  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    cfg = micro_config(vocab_size=100, n_layers=1, seq_len=128)
    cw = champion_weights(cfg)
    champ = ReferenceModel(cfg, cw, keep_features=True)
    seq = [int(x) for x in np.random.default_rng(1).integers(0, 100, 24)]
    champ.forward(seq, 0, 1)
    return cfg, cw, champ, seq, champ.feature_rows(0, len(seq)).copy()


def net_for(cfg, cw, hc, hw, ids=None):
    net = HeadNet(hc, torch.from_numpy(cw["token_embd.weight"]), torch.from_numpy(cw["output_norm.weight"]), ids)
    net.load_numpy(hw)
    return net


@pytest.mark.parametrize("window,subset", [(0, False), (5, True)])
def test_levels_are_the_drafters_chains(setup, window, subset):
    """Level d's row at q equals the numpy head's feature at q in a round started at q - d + 1 (positions before it
    from the champion's features, then its own chain fed the true tokens)."""
    cfg, cw, champ, seq, feats = setup
    hc = HeadConfig.for_champion(cfg, window=window)
    hw = random_head_weights(hc, 2, feature_scale=2.0)
    ids = np.arange(0, 100, 3) if subset else None
    net = net_for(cfg, cw, hc, hw, ids)
    T, depth = len(seq), 4
    with torch.no_grad():
        outs = net.levels(torch.from_numpy(feats)[None], torch.tensor(seq)[None], torch.arange(T)[None], depth)
    head = HeadModel(champ, hc, hw, ids)
    src = FeatureSource(feats, cfg)
    for d in range(depth):
        for q in range(d, T):
            L = q - d + 1
            head.bind(src)
            src.length = L - 1
            head.forward(seq[:L], 0, 1)
            for j in range(1, d + 1):
                head.forward([seq[L + j - 1]], L + j - 1, 1)
            want = head.predicted_features(q, q + 1)[0]
            got = outs[d][0, q].numpy()
            assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), (d, q)


def test_chain_runs_equal_the_numpy_simulation(setup):
    from exactspec.decode import GenerateConfig, generate
    cfg, cw, _, _, _ = setup
    champ = ReferenceModel(cfg, cw, keep_features=True)
    P = 6                                                        # a prompt of 6 and the champion's greedy answer
    seq = [3, 1, 4, 1, 5, 9]
    seq = seq + generate(champ, seq, GenerateConfig(max_new_tokens=18, k=0, drafter="none", adaptive=False)).token_ids
    champ.truncate(0)
    champ.forward(seq, 0, 1)
    feats = champ.feature_rows(0, len(seq)).copy()
    hc, hw = near_oracle_head(cfg, cw, feat_gain=0.3, seed=1)
    hw["blk.0.ffn_down.weight"] += np.random.default_rng(0).standard_normal(hw["blk.0.ffn_down.weight"].shape) \
        .astype(np.float32) * 0.15                                             # a good head, not a perfect one
    net = net_for(cfg, cw, hc, hw)
    T = len(seq)
    with torch.no_grad():
        run = chain_runs(net, torch.from_numpy(feats)[None], torch.tensor(seq)[None], torch.arange(T)[None], 6)[0]
    head = HeadModel(champ, hc, hw)
    ch = head_chains(head, feats[:T - 1], seq[:P], seq[P:], 6, lambda r, t: int(np.argmax(r)), full=False)
    assert ch["run"].tolist() == run[P:].tolist()
    assert 0 < ch["run"].mean() < 6                                            # neither trivial nor perfect


def test_export_loads_in_the_numpy_head(setup, tmp_path):
    cfg, cw, champ, seq, feats = setup
    hc = HeadConfig.for_champion(cfg, window=7, champion_sha256="c" * 64)
    ids = np.array([0, 2, 3, 5, 8, 13, 21, 34, 55, 89])
    net = net_for(cfg, cw, hc, random_head_weights(hc, 5), ids)
    path = tmp_path / "h.gguf"
    export_head(path, net, hc, "F32", {"variant": "test"})
    head = HeadModel.from_file(path, champ, "c" * 64)
    np_rows = head.forward(seq, 0)                                             # (T, vocab), -inf off the subset
    with torch.no_grad():
        out = net.levels(torch.from_numpy(feats)[None], torch.tensor(seq)[None], torch.arange(len(seq))[None], 1)[0]
        t_rows = net.logits(out)[0].numpy()                                    # (T, 10)
    assert np.isneginf(np.delete(np_rows, ids, axis=1)).all()
    assert np.abs(np_rows[:, ids] - t_rows).max() < 1e-4 * np.abs(t_rows).max()


def test_frequency_subset():
    ids = frequency_subset([[5, 5, 5, 7, 7, 1], [7, 9, 9]], 12, 3, always=[11])
    assert ids.tolist() == [5, 7, 11]        # 5 and 7 most frequent; 11 always; 9 (x2) and 1 dropped
    ids = frequency_subset([[3, 3, 4]], 12, 4)
    assert ids.tolist() == [0, 1, 3, 4]      # ties among the unseen -> lower ids


def test_training_lowers_the_loss_and_the_filter_drops_its_share(setup):
    cfg, cw, champ, seq, feats = setup
    hc = HeadConfig.for_champion(cfg)
    net = HeadNet(hc, torch.from_numpy(cw["token_embd.weight"]), torch.from_numpy(cw["output_norm.weight"]))
    f = torch.from_numpy(feats)
    net.init_weights(0, float(f.pow(2).mean(-1).sqrt().mean()))
    T = len(seq)
    args = (f[None], torch.tensor(seq)[None], torch.arange(T)[None], torch.ones(1, T))
    kw = dict(depth=3, sigma=f.std(0).clamp_min(1e-3), noise=0.0, feat_weight=0.5, decay=0.8)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    first = None
    for _ in range(40):
        loss, st = head_loss(net, *args, **kw)
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.5 * first and len(st) == 3
    # the filter keeps (1 - filter_frac) of the targets: the filtered level-0 CE is the mean of the easiest ones
    from exactspec_train.head import soft_ce
    with torch.no_grad():
        out = net.levels(*args[:3], 1)[0][0]
        ce = soft_ce(net.logits(out), net.logits(f))
        _, st_f = head_loss(net, *args, **{**kw, "depth": 1}, filter_frac=0.25)
    kept = ce[ce <= torch.quantile(ce, 0.75)]
    assert st_f[0]["ce"] == pytest.approx(float(kept.mean()), rel=1e-4)


def test_padded_batches_train_the_same(setup):
    """The trainer pads a batch's T up to a multiple of pad_to (few distinct shapes for the GPU's kernels): padding
    rows come after the real ones and weigh 0, so the loss and its gradients are those of the unpadded batch."""
    from exactspec_train.head_run import Data
    cfg, cw, champ, seq, feats = setup
    hc = HeadConfig.for_champion(cfg)
    f = torch.from_numpy(feats)
    seqs = [(np.asarray(seq[:17]), 0, np.ones(17, np.float32)), (np.asarray(seq[:13]), 0, np.ones(13, np.float32))]
    fl = [f[:17], f[:13]]
    kw = dict(depth=3, sigma=f.std(0).clamp_min(1e-3), noise=0.0, feat_weight=0.5, decay=0.8, filter_frac=0.25)
    res = []
    for pad in (1, 8):
        d = Data(seqs, fl, 2, torch.device("cpu"), pad_to=pad)
        tb, pb, wb, fb = d.batch([0, 1])
        assert tb.shape[1] == (17 if pad == 1 else 24) and float(wb[:, 17:].abs().sum()) == 0
        net = HeadNet(hc, torch.from_numpy(cw["token_embd.weight"]), torch.from_numpy(cw["output_norm.weight"]))
        net.init_weights(0, float(f.pow(2).mean(-1).sqrt().mean()))
        loss, st = head_loss(net, fb, tb, pb, wb, **kw)
        loss.backward()
        res.append((float(loss), [x["ce"] for x in st], net.w("blk.0.attn_q.weight").grad.clone()))
    assert res[0][0] == pytest.approx(res[1][0], rel=1e-5) and res[0][1] == pytest.approx(res[1][1], rel=1e-5)
    assert torch.allclose(res[0][2], res[1][2], rtol=1e-4, atol=1e-7)


def test_multi_run_plan_and_scheduler():
    """head_run multi's plan: NAME:VARIANT:TOTAL_S:GROUP; the scheduler steps the lowest group with time left, in it
    the run furthest behind its own schedule, so runs of equal TOTAL_S end with equal training time."""
    from exactspec_train.head_multi import parse_plan, pick_next
    from exactspec_train.head_run import VARIANTS
    plan = parse_plan("a:full:10:0,b:no-multistep:20:0,c:full:5:1", VARIANTS)
    assert [(e.name, e.variant, e.total_s, e.group) for e in plan] == [("a", "full", 10.0, 0),
                                                                       ("b", "no-multistep", 20.0, 0),
                                                                       ("c", "full", 5.0, 1)]
    for bad, frag in (("a:full:10", "NAME:VARIANT"), ("a:nope:10:0", "unknown variant"), ("a:full:0:0", "> 0"),
                      ("a:full:1:0,a:full:1:0", "used twice"), ("a b:full:1:0", "letters"), ("", "empty")):
        with pytest.raises(ValueError, match=frag):
            parse_plan(bad, VARIANTS)
    spent = {"a": 0.0, "b": 0.0, "c": 0.0}
    order = []
    while (n := pick_next(plan, spent)) is not None:
        order.append(n)
        spent[n] += 1.0 if n != "b" else 2.0          # b's steps cost twice a's
    assert spent == {"a": 10.0, "b": 20.0, "c": 5.0}
    assert order.index("c") > max(i for i, n in enumerate(order) if n in "ab")   # group 1 only after group 0
    assert order.count("a") == 10 and order.count("b") == 10                      # same fraction, step by step


def test_a_run_starts_from_a_trained_head(setup, tmp_path):
    """head_multi --init: a run starts from a head file's weights and vocabulary subset (a head of another window or
    without the run's subset is refused, naming the difference)."""
    from exactspec_train.head_multi import PlanEntry, init_weights, parse_init
    cfg, cw, champ, seq, feats = setup
    hc = HeadConfig.for_champion(cfg, window=7, champion_sha256="c" * 64)
    ids = np.array([0, 2, 3, 5, 8, 13, 21, 34, 55, 89])
    hw = random_head_weights(hc, 6)
    path = tmp_path / "h.gguf"
    export_head(path, net_for(cfg, cw, hc, hw, ids), hc, "F32", {"variant": "test"})
    weights, got = init_weights(path, {"window": 7, "vocab_subset": 10}, cfg)
    assert np.array_equal(got, ids)
    net = net_for(cfg, cw, hc, weights, got)
    for name, w in net.to_numpy().items():
        assert np.array_equal(w, hw[name]), name
    with pytest.raises(ValueError, match="window is 7, the run's is 9"):
        init_weights(path, {"window": 9, "vocab_subset": 10}, cfg)
    with pytest.raises(ValueError, match="it has a vocabulary subset, the run has none"):
        init_weights(path, {"window": 7, "vocab_subset": 0}, cfg)
    plan = [PlanEntry("warm", "full", 10.0, 0)]
    assert parse_init(f"warm={path}", plan) == {"warm": path}
    with pytest.raises(ValueError, match="one of the plan's runs"):
        parse_init(f"cold={path}", plan)
