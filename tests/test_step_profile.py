"""benchmarks.step_profile: op times grouped as the docs report them, for both networks."""

import pytest

from benchmarks import step_profile


@pytest.mark.parametrize(
    "op_type,node_name,group",
    [
        ("Mul", "tower_0/resnet/group1/Gelu/mul_1", "GELU"),
        ("Mul", "gradients/tower_0/resnet/group1/Gelu/mul_1_grad/Mul", "GELU"),
        ("Erf", "tower_0/resnet/group1/Erf", "GELU"),
        ("PartitionedCall", "tower_0/resnet/group1/FusedGelu/PartitionedCall", "GELU"),  # fused_gelu
        ("Mul", "tower_0/resnet/mul", "elementwise"),
        ("_MklNativeConv2DBackpropFilter", "gradients/x/Conv2D_grad", "convolution"),
        ("_MklMatMul", "gradients/x/Conv2D_1/MatMul_4", "convolution"),  # filter_gradient's matrix products
        ("MaxPoolGrad", "gradients/x/MaxPool_grad", "max pool"),
        ("_MklNativeFusedBatchNormGradV3", "gradients/x", "batch norm"),
        ("Unique", "x", "other"),
    ],
)
def test_ops_fall_in_their_group(op_type, node_name, group):
    assert step_profile.group_of(op_type, node_name) == group


def test_an_airbench_step_is_profiled_with_its_gelu_and_pools(mini_records):
    result = step_profile.profile(8, 8, "fp32", 0.25, 1, 1, network="airbench", group_depth=2, data_dir=mini_records)
    groups = result["groups_ms"]
    assert groups["convolution"] > 0 and groups["max pool"] > 0 and result["images_per_sec"] > 0
    assert groups["GELU"] > 0
    assert sum(groups.values()) == pytest.approx(result["op_ms_per_step"], abs=0.05)
    # The slowest single ops name their layer: a convolution gradient of one of the three groups.
    assert any("Conv2DBackprop" in n and "/group" in n for n in result["top_nodes_ms"])
    assert len(result["top_nodes_ms"]) == 20


def test_image_sizes_are_profiled_and_compared_with_32_pixels(mini_records, capsys):
    small = step_profile.profile(
        8, 8, "fp32", 0.25, 1, 1, image_size=20, network="airbench", group_depth=2, data_dir=mini_records
    )
    assert small["image_size"] == 20 and small["images_per_sec"] > 0
    result = {"bf16": {"images_per_sec": 800.0}, "bf16 24px": {"images_per_sec": 1440.0}}
    assert step_profile.run_name("bf16", 24) == "bf16 24px" and step_profile.run_name("fp32", 32) == "fp32"
    assert step_profile.size_speedups(result, ["bf16"], [32, 24]) == {"bf16": {32: 1.0, 24: 1.8}}
    assert step_profile.size_speedups(result, ["bf16"], [24]) == {}
    with pytest.raises(SystemExit):
        step_profile.main(["--image-sizes", "32", "12", "--out", "unused.json"])
    assert "--image-sizes [12]: each must be 32 or from 16 to 31" in capsys.readouterr().err
