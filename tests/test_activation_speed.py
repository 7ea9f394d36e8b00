"""benchmarks.activation_speed: the network's own activation shapes, each activation timed and compared."""

import json

from benchmarks import activation_speed


def test_shapes_are_the_networks_activations():
    # The whitening's 31x31 output, then per group (after its 2x2 pool) bn1's and bn2's (and with
    # airbench96's groups the residual's): 15x15x64, 7x7x256, 3x3x256.
    groups = [(15, 15, 64), (7, 7, 256), (3, 3, 256)]
    assert activation_speed.activation_shapes(4) == [(4, 31, 31, 24)] + [(4,) + g for g in groups for _ in range(2)]
    assert activation_speed.activation_shapes(4, group_depth=3) == [(4, 31, 31, 24)] + [
        (4,) + g for g in groups for _ in range(3)
    ]


def test_each_activation_is_timed_against_the_graph_without_it(tmp_path, capsys):
    out = tmp_path / "activation_speed.json"
    assert (
        activation_speed.main(
            ["--batch-size", "2", "--steps", "1", "--warmup", "1", "--rounds", "1"]
            + ["--precisions", "bf16", "--out", str(out)]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["batch_size"] == 2 and list(result["precisions"]) == ["bf16"]
    rounds = result["precisions"]["bf16"]["rounds_ms"]
    assert sorted(rounds) == sorted(activation_speed.ACTIVATIONS) and all(len(r) == 1 for r in rounds.values())
    # Each cost is its round less the graph without an activation.
    costs = result["precisions"]["bf16"]["ms"]
    assert costs == {a: round(rounds[a][0] - rounds["none"][0], 2) for a in ("tf.nn.gelu", "fused_gelu", "relu")}
    assert "bf16   fused_gelu" in capsys.readouterr().out
