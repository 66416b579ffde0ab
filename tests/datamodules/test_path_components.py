"""datamodules/path_components.py: a name that becomes a path is one safe path component."""

import pytest

from differank.datamodules.path_components import MAX_BYTES, path_component


@pytest.mark.parametrize("name", ["differank", "mq2008-v2.1", "run_7", "é" * (MAX_BYTES // 2)])
def test_a_folder_name_is_kept_as_it_is(name):
    assert path_component(name, "export.name") == name


@pytest.mark.parametrize(
    "name, why",
    [
        ("", "not empty"),
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("a/b", "no '/'"),
        ("../x", "no '/'"),
        ("a\\b", "no '/'"),
        ("a\0b", "NUL"),
        ("x" * (MAX_BYTES + 1), f"at most {MAX_BYTES} bytes"),
        ("é" * (MAX_BYTES // 2 + 1), f"at most {MAX_BYTES} bytes"),  # 2 bytes each in UTF-8
    ],
)
def test_path_component_a_name_that_is_not_one_folder_entry_is_refused(name, why):
    with pytest.raises(ValueError, match=r"^run\.name must be one file or folder name") as error:
        path_component(name, "run.name")
    assert why in str(error.value)


def test_path_component_a_logger_name_cannot_leave_the_run_folder(tmp_path):
    """``logger.csv.name=../x`` would put the CSV log outside the run folder: refused, naming the
    option, before a trainer or a folder is made."""
    from differank.rankers.run.runs import compose_config
    from differank.rankers.run.trainer_tasks import make_trainer

    cfg = compose_config(["logger=csv", "logger.csv.name=../escaped"], run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match=r"logger\.csv\.name"):
        make_trainer(cfg)
    assert not (tmp_path / "escaped").exists()
