"""The live loop on any workload: ``runs --workload FILE --speed K``, and a prediction that
replays the run's own arrivals."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from governor.bench.api import RequestLog, Workload
from lab.live.liverun import LiveRun
from lab.live.predict import predict, run_workload
from lab.live.runs import arrival_row, arrivals_of, workload_of
from lab.live.state import State

ROOT = Path(__file__).resolve().parents[3]
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n"
         "2023-11-16 18:15:56.6805900,4808,10\n")


def state(tmp_path: Path) -> State:
    return State(tmp_path, "sim", "", ROOT / "slo.yaml", {"max_num_seqs": 1024,
                 "max_num_batched_tokens": 8192}, {}, max_model_len=4096)


def args(**values: object) -> argparse.Namespace:
    base = {"workload": None, "speed": 1.0, "minutes": None, "rate_scale": 1.0}
    return argparse.Namespace(**{**base, **values})


def test_runs_replays_a_request_log_at_its_speed_capped_to_the_engines_context(
    tmp_path: Path,
) -> None:
    log = tmp_path / "azure.csv"
    log.write_text(AZURE)
    workload, source = workload_of(args(workload=log, speed=2.0), state(tmp_path))
    assert isinstance(workload, RequestLog) and source == str(log)
    arrivals = workload.arrivals(seed=1)
    assert [round(a.at, 3) for a in arrivals] == [0.0, 2.157, 5.0]
    # 4 808 + 10 tokens do not fit 4 096: the prompt is capped; by the spec's rules a 3 000-token
    # prompt is a document.
    assert (arrivals[2].prompt_tokens, arrivals[2].kind) == (4086, "doc")
    assert workload.report["capped_to_context"] == 1
    with pytest.raises(SystemExit, match="--rate-scale scales phases"):
        workload_of(args(workload=log, rate_scale=0.5), state(tmp_path))


def test_runs_without_a_workload_replays_the_headline(tmp_path: Path) -> None:
    workload, source = workload_of(args(minutes=3.0, rate_scale=0.5), state(tmp_path))
    assert isinstance(workload, Workload) and source == "headline"
    assert workload.duration_seconds == 180.0 and workload.rate_of("chat", 1.0) == 6.0


def test_the_prediction_replays_the_runs_own_arrivals_not_the_headline(tmp_path: Path) -> None:
    # 30 short chats in a minute: a light load, every request good on the H200 preset. The
    # headline over the same minute would be ~800 requests.
    log = tmp_path / "light.csv"
    header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    log.write_text(header + "".join(f"{2 * k},ChatGPT,300,40,340,Conversation log\n"
                                    for k in range(30)))
    workload, _ = workload_of(args(workload=log), state(tmp_path))
    rows = [arrival_row(a) for a in workload.arrivals(seed=1)]
    assert arrivals_of(rows) == workload.arrivals(seed=1)
    data = {"policy": "static", "label": "static 2048/1024", "seed": 1,
            "limits": {"max_num_seqs": 1024, "max_num_batched_tokens": 2048},
            "workload": {"minutes": 1.0, "kind": str(log), "name": "light", "rate_scale": 1.0,
                         "requests": 30},
            "duration_seconds": 60.0, "arrivals": rows}
    assert len(run_workload(data).arrivals(seed=1)) == 30
    predicted = predict(LiveRun(data, []), slo=ROOT / "slo.yaml", preset="llama-3-8b@h200",
                        window=20.0)
    assert predicted["goodput_rps"] == pytest.approx(30 / 60)
    assert predicted["attainment"] == 1.0
    # A file from before the arrivals were kept still predicts the headline it ran.
    old = {**data, "workload": {"minutes": 1.0, "rate_scale": 1.0}}
    del old["arrivals"]
    assert isinstance(run_workload(old), Workload)
