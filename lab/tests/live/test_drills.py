"""The live drills: what each injects, the load's requests, the readings kept at each poll, and
the parts ``start`` adds for them (the GPU exporter, the spec's classes)."""

from __future__ import annotations

import argparse
import doctest
import random
from pathlib import Path
from types import ModuleType

import pytest

from governor.contracts import causes
from governor.contracts.endpoints import EXPORTER, LOCAL_HOST
from governor.contracts.simdevice import fake_gpu_uuid
from governor.inference.engines.sim.tokenizer import pieces
from lab.live import cotenant, drill_load, drills, evidence, stack
from lab.live.__main__ import build_parser
from lab.live.drill import Timing
from lab.live.replay import SIM_WORDS, PromptBook
from lab.live.state import State

DOC_CLASS_TOKENS = 3000  # slo.yaml's doc class: prompts of at least this many tokens


@pytest.mark.parametrize("module", [drills, evidence, cotenant], ids=lambda m: m.__name__)
def test_the_examples_in_the_docstrings_hold(module: ModuleType) -> None:
    assert doctest.testmod(module).failed == 0


def test_every_drill_but_healthy_names_a_cause_the_verdict_knows() -> None:
    assert drills.by_name("healthy").cause is None
    assert {d.cause for d in drills.DRILLS} - {None} <= set(causes.NAMES)
    assert {"healthy", "batching", "kv_cache", "queue", "gpu_shared"} <= set(drills.NAMES)


def test_an_unknown_drill_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="batching"):
        drills.by_name("nope")


def test_only_the_batching_documents_are_long_enough_for_the_doc_class() -> None:
    for drill in drills.DRILLS:
        workload = (*drills.HEALTHY.traffic, *drill.background.traffic, *drill.workload.traffic)
        longest = max(t.prompt_words[1] for t in workload)
        if drill.name == "batching":
            assert min(t.prompt_words[0] for t in drill.workload.traffic) >= DOC_CLASS_TOKENS
        else:
            assert longest < DOC_CLASS_TOKENS, drill.name


def test_the_healthy_phase_carries_the_background_and_the_onset_the_drill_s_traffic() -> None:
    healthy = drill_load.workload_of("gpu_shared", "healthy", 0.5)
    assert [t.name for t in healthy.traffic] == ["chats", "long prompts"]
    assert healthy.traffic[0].rate_per_second == drills.HEALTHY.traffic[0].rate_per_second / 2
    assert drill_load.workload_of("gpu_shared", "inject", 1.0).traffic == ()
    assert [t.name for t in drill_load.workload_of("queue", "inject", 1.0).traffic] == ["backlog"]


def test_a_request_s_prompt_has_exactly_the_drawn_tokens_and_its_answer_the_drawn_length() -> None:
    (traffic,) = drills.by_name("batching").workload.traffic
    body = drill_load.request_body(traffic, "m", PromptBook.from_words(SIM_WORDS),
                                   random.Random(3))
    messages, answer = body["messages"], body["max_tokens"]
    assert isinstance(messages, list) and isinstance(answer, int) and len(messages) == 1
    low, high = traffic.prompt_words
    assert low <= len(pieces(messages[0]["content"])) <= high
    assert traffic.max_tokens[0] <= answer <= traffic.max_tokens[1]
    assert body["ignore_eos"] is True and body["stream"] is False and body["model"] == "m"


def test_a_drill_describes_its_injection_for_the_json_line() -> None:
    described = drills.by_name("queue").describe()
    assert described["limits"] == {"max_num_seqs": 32}
    assert described["traffic"][0].startswith("backlog: 30/s open loop")
    assert drills.by_name("gpu_shared").describe()["cotenant_gib"] == 16.0


def test_the_poll_keeps_each_input_by_its_distinguishing_labels_and_drops_nan() -> None:
    samples = [
        {"metric": {"__name__": "verdict:burn:ratio", "slo": "itl", "instance": "a:1"},
         "value": [0, "3.14159"]},
        {"metric": {"__name__": "verdict:kv_usage:ratio", "instance": "a:1"},
         "value": [0, "NaN"]},
        {"metric": {"__name__": "verdict:client_quantile:seconds", "slo": "ttft"},
         "value": [0, "+Inf"]},
        {"metric": {}, "value": [0, "7"]},
    ]
    assert evidence.flatten(samples) == {"?": 7.0, "verdict:burn:ratio{slo=itl}": 3.142,
                                         "verdict:client_quantile:seconds{slo=ttft}":
                                             float("inf")}


def test_one_selector_names_every_input_series() -> None:
    selector = evidence.inputs_selector()
    assert selector.startswith('{__name__=~"') and "verdict:burn:ratio" in selector
    assert selector.count("|") == len(evidence.INPUTS) - 1


def test_the_drill_command_takes_known_drills_in_order_and_names_the_known_ones() -> None:
    args = build_parser().parse_args(["drill", "queue,healthy", "--state", "s", "--out", "o"])
    assert args.drills == ("queue", "healthy") and args.warm_up == Timing.warm_up_seconds
    with pytest.raises(SystemExit):
        build_parser().parse_args(["drill", "queue,nope", "--state", "s", "--out", "o"])


def _start_args(engine: str, *more: str) -> argparse.Namespace:
    return build_parser().parse_args(["start", "--state", "s", "--engine", engine, *more])


def test_the_exporter_reads_nvml_beside_vllm_and_follows_the_sim_s_fake_gpus(
        tmp_path: Path) -> None:
    state = State(tmp_path, "sim", "m", Path("slo.yaml"), {}, {}, replicas=2, port_offset=7)
    sim = stack.exporter_child(_start_args("sim"), state, tmp_path)
    assert sim.argv[sim.argv.index("--fake-gpus") + 1] == "2"
    assert sim.argv[sim.argv.index("--follow") + 1] == ",".join(state.inference_urls())
    real = stack.exporter_child(_start_args("vllm"), state, tmp_path)
    assert "--fake-gpus" not in real.argv and "--follow" not in real.argv
    assert real.argv[real.argv.index("--port") + 1] == str(EXPORTER.port + 7)
    assert real.health_url == f"http://{LOCAL_HOST}:{EXPORTER.port + 7}/health"


def test_a_sim_replica_runs_on_its_fake_gpu_and_classes_come_from_the_spec(
        tmp_path: Path) -> None:
    argv = stack._service_argv(_start_args("sim", "--classes"), "p", tmp_path / "t", 8001, 1)
    assert argv[argv.index("--gpu-uuid") + 1] == fake_gpu_uuid(1)
    assert Path(argv[argv.index("--slo") + 1]) == Path("slo.yaml").resolve()
    assert "--slo" not in stack._service_argv(_start_args("sim"), "p", tmp_path / "t", 8001)


ROOT = Path(__file__).resolve().parents[3]
STOCK_SPEC = ROOT / "examples" / "stock-vllm" / "slo.yaml"
LAB_SPEC = ROOT / "lab" / "workloads" / "histograms" / "vllm.yaml"


@pytest.mark.parametrize(("server", "spec", "fits"), [
    ("vllm", STOCK_SPEC, True), (stack.STOCK_SERVER, STOCK_SPEC, True),
    ("governor", ROOT / "slo.yaml", True), ("governor serve", LAB_SPEC, True),
    ("vllm", LAB_SPEC, False), (stack.STOCK_SERVER, ROOT / "slo.yaml", False),
    ("governor", STOCK_SPEC, False)])
def test_a_spec_must_read_the_series_its_server_exports(server: str, spec: Path,
                                                          fits: bool) -> None:
    from governor.generation.catalog import load_checked_spec

    why = stack.spec_mismatch(server, load_checked_spec(spec), spec)
    assert (why is None) == fits, why
    if not fits:
        assert "kubernetes.server: vllm" in str(why)


def test_a_drill_on_stock_vllm_with_governor_serve_s_rules_stops_before_it_starts(
        tmp_path: Path) -> None:
    # On a GPU the stock queue and kv_cache drills read `unknown` this way: the rules looked
    # for governor serve's stages, which vllm serve has none of.
    from lab.live.drill import drill

    State(tmp_path, "vllm", "m", LAB_SPEC, {"max_num_seqs": 8}, {"server": stack.STOCK_SERVER}
          ).save()
    args = argparse.Namespace(state=tmp_path, out=tmp_path / "out")
    with pytest.raises(SystemExit, match=r"does not say kubernetes\.server: vllm"):
        drill(args)
    assert not (tmp_path / "out").exists()
