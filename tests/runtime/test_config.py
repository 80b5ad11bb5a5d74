"""Malformed pipeline files fail early with the file and field named."""

import pytest

from runtime.config import ConfigError, load_config, parse_config

GOOD = {"stages": [{"name": "a", "executor": "voice_server.testing.stages:Echo"},
                   {"name": "b", "executor": "voice_server.testing.stages:Echo"}],
        "edges": [{"from": "a", "to": "b"}]}


def write(tmp_path, text):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    return f


def test_good_config_places_each_stage_alone():
    cfg = parse_config(GOOD)
    assert [g.stages for g in cfg.placement.groups] == [["a"], ["b"]]
    assert cfg.route_from("a") == ["a", "b"]


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c["edges"].append({"from": "a", "to": "zz"}), "edges[1].to: unknown stage 'zz'"),
    (lambda c: c["edges"].append({"from": "b", "to": "a"}), "cycle: a -> b -> a"),
    (lambda c: c["stages"][0].update(executor="no.such.module:X"), "stages[0].executor: module 'no.such.module'"),
    (lambda c: c["stages"][0].update(executor="nocolon"), "stages[0].executor"),
    (lambda c: c["stages"][1].update(max_batch="many"), "stages[1].max_batch"),
    (lambda c: c["stages"][1].update(scheduler="magic"), "stages[1].scheduler"),
    (lambda c: c["stages"][1].update(colour="red"), "stages[1].colour"),
    (lambda c: c["stages"].append({"name": "a", "executor": "voice_server.testing.stages:Echo"}), "duplicate stage names"),
    (lambda c: c.update(placement={"groups": [{"name": "g", "stages": ["a", "q"]}]}), "unknown stage 'q'"),
    (lambda c: c.update(placement={"groups": [{"name": "g", "stages": ["a"]}, {"name": "h", "stages": ["a"]}]}),
     "already placed"),
    (lambda c: c.update(placement={"groups": [{"name": "g", "stages": ["a"], "device": "tpu"}]}), "device"),
])
def test_bad_configs_name_the_field(mutate, needle):
    import copy
    cfg = copy.deepcopy(GOOD)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        parse_config(cfg, "pipe.yaml")
    assert needle in str(err.value)
    assert "pipe.yaml" in str(err.value)


def test_yaml_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="p.yaml: not valid YAML"):
        load_config(write(tmp_path, "stages: [\n  - name: a\n   bad"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_shipped_configs_parse():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "configs"
    for f in root.glob("*.yaml"):
        load_config(f, check_imports=False)
