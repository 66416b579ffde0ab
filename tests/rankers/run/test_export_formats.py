"""``task=export export.format=...``: each format named writes its engine's files from the
checkpoint (Solr JSON, a Triton repository whose config matches the ONNX graph's inputs and
outputs), every format asked for is written whole or none is, and a wrong format is named."""

import json
import re

import pytest
import torch
from omegaconf import OmegaConf

from differank.datamodules.atomic_files import write_files
from differank.rankers.checkpoints import Scorer, load_ranker
from differank.rankers.run.export_formats import check_formats
from differank.rankers.run.tasks import export
from differank.rankers.run.triton import triton_config, triton_files
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.transformer import TransformerRanker
from tests.conftest import TINY_RUN, run_config

onnx = pytest.importorskip("onnx", reason="onnx is the optional export extra")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the optional export extra")

# the ONNX element types and the Triton data types that hold them
TRITON_TYPES = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.BOOL: "TYPE_BOOL"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("trained")
    run_config(TINY_RUN, run_dir)
    return run_dir / "checkpoints" / "best.ckpt"


def graph_signature(path) -> list[tuple[str, str, list]]:
    """(name, Triton type, dims with -1 for a dynamic axis) of each input and output."""
    model = onnx.load(str(path))
    signature = []
    for value in [*model.graph.input, *model.graph.output]:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        signature.append((value.name, TRITON_TYPES[tensor.elem_type], dims))
    return signature


def config_signature(text: str) -> list[tuple[str, str, list]]:
    """The same, read from a config.pbtxt's input and output entries."""
    entries = re.findall(r'name: "(\w+)"\s+data_type: (\w+)\s+dims: \[ ([-\d, ]+) \]', text)
    return [(name, kind, [int(d) for d in dims.split(",")]) for name, kind, dims in entries]


def test_solr_and_triton_from_the_command_line(checkpoint, tmp_path):
    overrides = ["task=export", f"ckpt_path={checkpoint}", "export.format=[solr,triton]"]
    run_config([*TINY_RUN, *overrides, "export.name=tiny"], tmp_path)
    files = (tmp_path / "export").rglob("*")
    written = sorted(p.relative_to(tmp_path / "export").as_posix() for p in files if p.is_file())
    weights = ["triton/tiny/1/model.onnx.data"]  # when the exporter keeps weights apart
    assert [name for name in written if name not in weights] == [
        "solr/features.json",
        "solr/model.json",
        "triton/tiny/1/model.onnx",
        "triton/tiny/config.pbtxt",
    ]
    assert json.loads((tmp_path / "export/solr/model.json").read_text())["name"] == "tiny"
    config = (tmp_path / "export/triton/tiny/config.pbtxt").read_text()
    assert 'name: "tiny"' in config and "max_batch_size: 0" in config
    model = tmp_path / "export/triton/tiny/1/model.onnx"
    assert config_signature(config) == graph_signature(model)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    scorer = load_ranker(checkpoint)
    for shape in [(1, 1, 46), (3, 50, 46)]:
        features = torch.rand(shape)
        served = torch.from_numpy(session.run(None, {"features": features.numpy()})[0])
        torch.testing.assert_close(served, scorer(features).detach(), rtol=0, atol=1e-5)


def test_a_triton_repository_of_a_transformer_takes_the_mask(tmp_path):
    scorer = Scorer(TransformerRanker(5, d_model=8, num_heads=2, num_layers=1)).eval()
    files = triton_files(scorer, tmp_path, name="listwise")
    config = files[tmp_path / "listwise" / "config.pbtxt"].decode()
    assert config_signature(config) == [
        ("features", "TYPE_FP32", [-1, -1, 5]),
        ("mask", "TYPE_BOOL", [-1, -1]),
        ("scores", "TYPE_FP32", [-1, -1]),
    ]
    write_files(files)
    assert config_signature(config) == graph_signature(tmp_path / "listwise" / "1" / "model.onnx")


def test_the_formats_asked_for_are_written_whole_or_none(tmp_path):
    """Solr cannot hold a transformer: the TorchScript file asked for with it is not written."""
    scorer = Scorer(TransformerRanker(5, d_model=8, num_heads=2, num_layers=1)).eval()
    with pytest.raises(ValueError, match="export.format=onnx"):
        export(scorer, tmp_path, OmegaConf.create({"format": ["torchscript", "solr"]}))
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.parametrize("asked", ["pmml", ["onnx", "tf"], []])
def test_an_unknown_format_is_named(asked):
    with pytest.raises(ValueError, match="export.format must be one of"):
        check_formats(asked)


def test_a_triton_model_name_must_be_a_folder_name():
    with pytest.raises(ValueError, match="export.name"):
        triton_config("../up", 3, uses_mask=False)


def test_whole_or_absent_an_export_blocked_at_its_last_file_leaves_the_old_export(tmp_path):
    """solr/features.json is a directory: the rename stage fails there, and scorer.pt and
    solr/model.json, already renamed over the old export, are put back as they were."""
    folder = tmp_path / "export"
    (folder / "solr" / "features.json").mkdir(parents=True)
    (folder / "solr" / "model.json").write_text("the old model\n")
    (folder / "scorer.pt").write_bytes(b"the old scorer")
    scorer = Scorer(LinearRanker(3)).eval()
    with pytest.raises(IsADirectoryError, match="features.json"):
        export(scorer, tmp_path, OmegaConf.create({"format": ["torchscript", "solr"]}))
    assert (folder / "solr" / "model.json").read_text() == "the old model\n"
    assert (folder / "scorer.pt").read_bytes() == b"the old scorer"
    assert sorted(p.name for p in folder.rglob("*")) == [
        "features.json",
        "model.json",
        "scorer.pt",
        "solr",
    ]


@pytest.mark.parametrize("name", ["..", ".", "", "up/../..", "a\\b", "nul\0", "x" * 256])
def test_path_component_a_triton_name_that_leaves_its_folder_is_refused(name, tmp_path):
    """export.name=.. wrote config.pbtxt and the model beside export/triton/, not inside."""
    scorer = Scorer(LinearRanker(3)).eval()
    with pytest.raises(ValueError, match="export.name must be one file or folder name"):
        triton_files(scorer, tmp_path / "export" / "triton", name)
    assert not (tmp_path / "export").exists()
