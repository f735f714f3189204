"""``hookscope grads`` and ``hookscope trace --backward`` in-process: the table, the
picture, and one-line errors with exit status 2."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from helpers import assert_one_error_line, model_spec, run_cli

MODEL = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
""")


@pytest.fixture
def model_file(tmp_path: Path) -> str:
    path = tmp_path / "net.py"
    path.write_text(MODEL)
    return f"{path}:build"


def test_grads_prints_a_row_per_parameter_with_anomalies_flagged(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "g.png"
    code, out, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "3",
                             "--explode-above", "0.5", "--plot", str(png), "--no-color")
    assert code == 0, err
    assert "Gradient norms over 3 steps" in out
    for name in ("0.weight", "0.bias", "2.weight", "2.bias"):
        assert name in out
    assert "explode at step 0" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_grads_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], model_file: str
) -> None:
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,5", "--steps", "1")
    assert_one_error_line(code, err)
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--device", "meta")
    assert_one_error_line(code, err, "meta")
    for option, value in (("--explode-above", "-3"), ("--vanish-below", "0")):
        code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", option, value)
        line = assert_one_error_line(code, err, f"{option} must be a positive number")
        assert "_" not in line.split(":")[1].split()[0]  # the option, not the argument
    # --lr inf trained to all-NaN norms and exited 0; nan and negatives were refused
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--lr", "inf")
    assert_one_error_line(code, err, "--lr must be a finite learning rate")


def test_an_output_that_cannot_be_written_is_refused_before_training_and_plotting(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path,
) -> None:
    """-o was checked only at the end: the steps ran and --plot was written first."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "g.png"
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "2",
                           "--plot", str(png), "-o", str(tmp_path / "missing" / "g.txt"))
    assert_one_error_line(code, err, "does not exist")
    assert not png.exists()


def test_a_model_with_nothing_to_train_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It was an internal error (exit 1) from the optimizer's empty parameter list."""
    spec = model_spec(tmp_path, "from torch import nn\n\ndef relu():\n    return nn.ReLU()\n",
                      "relu")
    code, _, err = run_cli(capsys, "grads", spec, "--input", "3,2")
    assert_one_error_line(code, err, "has no parameter that requires grad")


@pytest.mark.parametrize("plot", ["out.txt", "out.pgf", "missing-dir/g.png"])
def test_a_plot_path_that_cannot_be_written_is_refused_before_training(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, plot: str,
) -> None:
    pytest.importorskip("matplotlib")
    import hookscope.cli.grads_training as grads_training

    trained: list[int] = []
    monkeypatch.setattr(grads_training, "train", lambda *a, **k: trained.append(1))
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "2",
                           "--plot", str(tmp_path / plot))
    assert_one_error_line(code, err, "is not an image format" if "." in plot[-4:]
                          and "/" not in plot else "does not exist")
    assert trained == []
    assert not (tmp_path / plot).exists()


def test_a_plot_path_that_is_a_directory_is_refused_naming_plot(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib")
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "2",
                           "--plot", str(tmp_path))
    assert_one_error_line(code, err, "--plot")
    assert "-o out.txt" not in err and "is a directory" in err


def test_trace_backward_shows_the_backward_columns(
    capsys: pytest.CaptureFixture[str], model_file: str
) -> None:
    code, out, err = run_cli(capsys, "trace", model_file, "--input", "3,4", "--backward",
                             "--no-color")
    assert code == 0, err
    flat = " ".join(out.split())  # headers wrap between words to fit the width
    assert "|grad" in flat and "out|" in flat and "in|" in flat and "Bwd" in flat
    code, out, err = run_cli(capsys, "trace", model_file, "--input", "3,4", "--backward",
                             "--format", "csv")
    assert code == 0, err
    assert "grad_output_norm" in out.splitlines()[0]


def test_two_runs_print_the_same_numbers(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    """The weights of a model built without a seed were new on every run, so were the
    norms (``hookscope grads torchvision:resnet18`` gave 1412, then 1025)."""
    import torch

    path = tmp_path / "unseeded.py"
    path.write_text(MODEL.replace("torch.manual_seed(0)\n", ""))
    outs = []
    for _ in range(2):
        torch.manual_seed(len(outs) + 1)  # whatever the process drew before
        code, out, err = run_cli(capsys, "grads", f"{path}:build", "--input", "3,4",
                                 "--steps", "2", "--no-color")
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]


TRAIN_ONLY_FAILURES = textwrap.dedent("""
    import torch
    from torch import nn

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            raise RuntimeError("boom in backward")

    class Bad(nn.Module):
        def forward(self, x):
            return Boom.apply(x)

    def batchnorm():  # built in eval mode: fails in training mode alone, on a batch of 1
        return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()

    def bad_backward():
        return nn.Sequential(nn.Linear(4, 4), Bad(), nn.Linear(4, 1))
""")


@pytest.mark.parametrize(("factory", "fragments"), [
    ("batchnorm", ("module '1' (BatchNorm1d", "Expected more than 1 value")),
    ("bad_backward", ("backward raised RuntimeError at step 0", "boom in backward")),
])
def test_a_model_that_fails_only_in_training_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, factory: str,
    fragments: tuple[str, ...],
) -> None:
    path = tmp_path / "train_only.py"
    path.write_text(TRAIN_ONLY_FAILURES)
    code, _, err = run_cli(capsys, "grads", f"{path}:{factory}", "--input", "1,4")
    assert_one_error_line(code, err, *fragments)


def test_the_caption_says_how_the_numbers_were_made(
    capsys: pytest.CaptureFixture[str], model_file: str
) -> None:
    code, out, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "3",
                             "--lr", "0.01", "--explode-above", "0.3", "--no-color",
                             "--width", "200")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "loss: cross-entropy on random labels (2 classes)" in flat
    assert "optimizer: SGD, lr 0.01" in flat
    assert "3 steps, a new random batch each (--seed 0): 3,4:float32" in flat
    rows = [line for line in out.splitlines() if "explode at step" in line]
    count = sum(int(m) for m in re.findall(r"\(\+(\d+) more\)", out)) + len(rows)
    assert rows and f"{count} anomal" in flat and f"{count} explode: " in flat


PLANTED = textwrap.dedent("""
    import torch
    from torch import nn

    class Amplify(torch.autograd.Function):
        '''The identity forward; its backward multiplies the gradient by `factor`.'''
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g * ctx.factor, None

    class Planted(nn.Module):
        def __init__(self, factor):
            super().__init__()
            torch.manual_seed(0)
            self.first, self.last = nn.Linear(4, 4), nn.Linear(4, 2)
            self.factor = factor

        def forward(self, x):
            return self.last(Amplify.apply(self.first(x), self.factor))

    def exploding():
        return Planted(1e6)

    def nonfinite():
        return Planted(float("nan"))
""")


@pytest.mark.parametrize(("factory", "options", "code"), [
    ("exploding", ("--explode-above", "100", "--fail-on", "exploding"), 1),
    ("exploding", ("--explode-above", "100", "--fail-on", "any"), 1),
    ("exploding", ("--explode-above", "100"), 0),
    ("exploding", ("--explode-above", "1e12", "--fail-on", "exploding"), 0),
    ("exploding", ("--vanish-below", "1e-12", "--fail-on", "vanishing"), 0),
    ("exploding", ("--fail-on", "nonfinite"), 0),
    ("nonfinite", ("--fail-on", "nonfinite"), 1),
    ("nonfinite", ("--fail-on", "any"), 1),
])
def test_fail_on_exits_with_1_after_the_table_when_that_kind_was_flagged(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, factory: str,
    options: tuple[str, ...], code: int,
) -> None:
    import torch

    spec = model_spec(tmp_path, PLANTED, factory)
    got, out, err = run_cli(capsys, "grads", spec, "--input", "3,4", "--steps", "2",
                            "--no-color", *options)
    assert got == code, err
    assert "Gradient norms over 2 steps" in out  # the table comes first
    if factory == "exploding":  # the oracle: the planted gradient, by hand
        namespace: dict[str, object] = {}
        exec(PLANTED, namespace)
        model = namespace["exploding"]()  # type: ignore[operator]
        g = torch.Generator().manual_seed(0)  # step 0: the batch, then the labels
        x = torch.randn(3, 4, generator=g)
        y = torch.randint(0, 2, (3,), generator=g)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        assert 100 < model.first.weight.grad.norm().item() < 1e12
        assert model.last.weight.grad.norm().item() < 100


def test_loss_choices_that_do_not_fit_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model_file: str
) -> None:
    spec = model_spec(tmp_path, """
        import torch
        from torch import nn

        def seq():
            torch.manual_seed(0)
            return nn.Linear(4, 2)
        """, "seq")
    code, _, err = run_cli(capsys, "grads", spec, "--input", "3,5,4", "--loss", "ce")
    assert_one_error_line(code, err, "--loss ce", "[3, 5, 2]")
    code, _, err = run_cli(capsys, "grads", spec, "--input", "3,4", "--loss", "lm")
    assert_one_error_line(code, err, "--loss lm", "[3, 2]")
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--loss", "l2")
    assert_one_error_line(code, err, "--loss", "'l2'")
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--fail-on",
                           "exploding")
    assert_one_error_line(code, err, "--fail-on exploding needs --explode-above")
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--clip", "0")
    assert_one_error_line(code, err, "--clip must be a positive number")


def test_auto_picks_the_loss_of_the_model_kind() -> None:
    import torch
    from torch import nn

    from hookscope.cli.grads_loss import choose_loss

    transformers = pytest.importorskip("transformers")
    outputs = transformers.modeling_outputs
    net = nn.Linear(1, 1)
    logits = torch.randn(2, 5, requires_grad=True)
    tokens = torch.randn(2, 6, 11, requires_grad=True)
    ids = torch.zeros(2, 6, dtype=torch.long)
    causal = type("TinyForCausalLM", (nn.Module,), {})()
    cases = [
        (net, logits, None, "ce"),  # a torchvision classifier's [B, C]
        (net, outputs.SequenceClassifierOutput(logits=logits), None, "ce"),
        (causal, outputs.CausalLMOutput(logits=tokens), ids, "lm"),
        (net, outputs.MaskedLMOutput(logits=tokens), ids, "ce"),  # per token
        (net, tokens, ids, "mse"),  # a bare [B, T, H] tensor: hidden states
        (net, torch.randn(2, 3, 4, 4, requires_grad=True), None, "mse"),  # feature maps
        (net, {"loss": logits.sum(), "logits": logits}, None, "model"),
        (net, torch.randn(2, 1, requires_grad=True), None, "mse"),  # one score: regression
        (net, (logits, tokens), None, "mse"),
    ]
    for model, out, token_ids, kind in cases:
        assert choose_loss("auto", model, out, token_ids).kind == kind, (out, kind)
    loss = choose_loss("auto", net, logits, None)
    labels = torch.randint(0, 5, (2,), generator=torch.Generator().manual_seed(3))
    want = nn.functional.cross_entropy(logits, labels)
    assert loss.compute(logits, None, torch.Generator().manual_seed(3)).item() == want.item()


def test_a_single_step_is_not_told_as_a_change(
    capsys: pytest.CaptureFixture[str], model_file: str
) -> None:
    """``--steps 1`` printed "1 steps" and "1.12 at step 0 -> 1.12 at step 0", as if
    the loss had been seen twice; the JSON's one step is the oracle for the numbers."""
    import json

    args = ("grads", model_file, "--input", "3,4", "--steps", "1", "--width", "200")
    code, out, err = run_cli(capsys, *args, "--no-color")
    assert code == 0, err
    code, doc, err = run_cli(capsys, *args, "--format", "json")
    assert code == 0, err
    (step,) = json.loads(doc)["steps"]
    assert "1 steps" not in out and "->" not in out, out
    assert "Gradient norms over 1 step\n" in out
    assert f"{step['loss']:.4g} at step 0\n" in out and "1 step, a new random batch (" in out
    assert out.rstrip().endswith("no anomaly flagged")
    assert f"total gradient norm: {step['total_norm']:.4g} at step 0" in out


def test_masked_and_seq2seq_lms_train_on_a_token_cross_entropy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A masked LM's or T5's [batch, tokens, vocabulary] logits got MSE to N(0, 1) targets,
    whose gradients are a vocabulary's size too small for what training them gives; the
    loss is now the cross-entropy per token their own losses are, checked against
    ``F.cross_entropy`` in its class-dimension-1 form, and an untrained model's loss on
    random labels is at least about log(vocabulary)."""
    import math

    import torch

    from hookscope.cli.grads_loss import choose_loss

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32))
    ids = torch.randint(0, 40, (2, 6))
    out = bert(ids)
    loss = choose_loss("auto", bert, out, ids)
    assert loss.kind == "ce" and "per token (40 classes)" in loss.description
    labels = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(5))
    want = torch.nn.functional.cross_entropy(out.logits.transpose(1, 2), labels)
    got = loss.compute(out, ids, torch.Generator().manual_seed(5))
    assert torch.allclose(got, want, rtol=1e-6, atol=0)
    for spec, config in [
        ("transformers:bert/masked-lm", "num_hidden_layers=1,hidden_size=16,"
         "num_attention_heads=2,intermediate_size=32,vocab_size=50"),
        ("transformers:t5/seq2seq-lm", "num_layers=1,d_model=16,num_heads=2,d_ff=32,d_kv=8,"
         "vocab_size=50"),
    ]:
        code, doc, err = run_cli(capsys, "grads", spec, "--config", config, "--input", "2,8",
                                 "--steps", "1", "--format", "json")
        assert code == 0, err
        import json

        report = json.loads(doc)
        assert "per token (50 classes)" in report["loss_description"], spec
        # random labels: no better than chance, log(50) = 3.9; MSE gave about 1
        assert report["steps"][0]["loss"] > math.log(50) - 0.5, report["steps"]


def test_googlenets_auxiliary_classifiers_are_trained_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """GoogLeNet in training mode returns its two auxiliary classifiers' logits beside
    its own; the loss took the main logits only, so the command reported 14 parameters
    that training gives a gradient to as "no gradient". The loss is GoogLeNet's own
    recipe (0.3 per auxiliary loss on the same labels), checked against a hand-written
    sum, and every parameter that ``param.grad`` says backward reaches has a norm."""
    import torch
    import torchvision

    from hookscope.cli.grads_loss import choose_loss

    torch.manual_seed(0)
    net = torchvision.models.googlenet(num_classes=5, aux_logits=True, init_weights=False)
    out = net(torch.randn(2, 3, 64, 64))
    loss = choose_loss("auto", net, out, None)
    assert "aux_logits2 and aux_logits1" in loss.description
    labels = torch.randint(0, 5, (2,), generator=torch.Generator().manual_seed(1))
    ce = torch.nn.functional.cross_entropy
    want = ce(out.logits, labels) + 0.3 * (ce(out.aux_logits1, labels)
                                           + ce(out.aux_logits2, labels))
    got = loss.compute(out, None, torch.Generator().manual_seed(1))
    assert torch.allclose(got, want, rtol=1e-6, atol=0)
    got.backward()
    assert all(p.grad is not None for p in net.aux1.parameters())
    code, text, err = run_cli(capsys, "grads", "torchvision:googlenet", "--input",
                              "2,3,64,64", "--steps", "1", "--width", "200")
    assert code == 0, err
    assert "no gradient" not in text and re.search(r"^aux1\.fc2\.weight +\d", text, re.M)


def test_segmentation_models_train_on_a_per_pixel_cross_entropy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """torchvision's segmentation models return ``{"out": [B, C, H, W], "aux": ...}``;
    auto gave them MSE to N(0, 1) targets, averaged over the classes as well. The loss
    is now torchvision's reference criterion (cross-entropy per pixel, plus 0.5 times the
    aux head's), written out here by hand as the oracle."""
    import torch
    import torchvision

    from hookscope.cli.grads_loss import choose_loss

    torch.manual_seed(0)
    net = torchvision.models.segmentation.fcn_resnet50(
        num_classes=4, aux_loss=True, weights_backbone=None)
    out = net(torch.randn(2, 3, 32, 32))
    loss = choose_loss("auto", net, out, None)
    assert "per pixel (4 classes), plus 0.5 x that of aux" in loss.description
    target = torch.randint(0, 4, (2, 32, 32), generator=torch.Generator().manual_seed(2))
    ce = torch.nn.functional.cross_entropy
    want = ce(out["out"], target) + 0.5 * ce(out["aux"], target)
    got = loss.compute(out, None, torch.Generator().manual_seed(2))
    assert torch.allclose(got, want, rtol=1e-6, atol=0)
    code, text, err = run_cli(capsys, "grads", "torchvision:lraspp_mobilenet_v3_large",
                              "--input", "2,3,32,32", "--steps", "1", "--width", "200")
    assert code == 0, err
    assert "loss: cross-entropy on random labels per pixel (21 classes)" in text


ZERO_BIAS = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        nn.init.zeros_(net[2].bias)
        return net
""")


def test_relative_shows_a_zero_initialised_bias_with_a_gradient_as_inf(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    import torch

    path = tmp_path / "zero_bias.py"
    path.write_text(ZERO_BIAS)
    # the oracle: the bias gets a gradient at the first step, and its weight is zeros
    ns: dict[str, object] = {}
    exec(ZERO_BIAS, ns)
    net = ns["build"]()  # type: ignore[operator]
    net(torch.randn(3, 4)).pow(2).sum().backward()
    assert float(net[2].bias.grad.norm()) > 0 and float(net[2].bias.detach().norm()) == 0
    code, out, err = run_cli(capsys, "grads", f"{path}:build", "--input", "3,4", "--steps",
                             "1", "--relative", "--no-color")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("2.bias"))
    assert "no gradient" not in row and "inf" in row


def test_json_writes_a_non_finite_norm_as_every_document_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    import json
    import math

    import torch

    from hookscope.core.records.value_json import float_in

    spec = model_spec(tmp_path, PLANTED, "nonfinite")
    code, out, err = run_cli(capsys, "grads", spec, "--input", "3,4", "--steps", "1",
                             "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    namespace: dict[str, object] = {}
    exec(PLANTED, namespace)
    model = namespace["nonfinite"]()  # type: ignore[operator]
    g = torch.Generator().manual_seed(0)  # step 0: the batch, then the labels
    x, y = torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    hand = float(model.first.weight.grad.norm())
    assert not math.isfinite(hand)  # the oracle: a non-finite gradient, by hand
    entry = next(p for p in doc["parameters"] if p["path"] == "first.weight")
    assert entry["grad_norms"] == [{"$float": "nan" if math.isnan(hand) else "inf"}]
    assert math.isnan(float_in(doc["steps"][0]["total_norm"]) or 0.0) or math.isinf(
        float_in(doc["steps"][0]["total_norm"]) or 0.0)
    assert "nan" not in [v for e in doc["parameters"] for v in e["grad_norms"]]
