"""The memory layer: ingest, search, context, forget, correct, reopen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dentate

CONVERSATION: list[dict[str, Any]] = [
    {"speaker": "Ana", "text": "I adopted a grey cat called Miso last week.", "timestamp": "2024-05-07T10:00:00Z", "session": "1", "id": "s1-1"},
    {"speaker": "Ben", "text": "Lovely! Is Miso settling in?", "timestamp": "2024-05-07T10:01:00Z", "session": "1", "id": "s1-2"},
    {"speaker": "Ana", "text": "Yes, she sleeps on my keyboard while I work on the garden plans.", "timestamp": "2024-05-07T10:02:00Z", "session": "1", "id": "s1-3"},
    {"speaker": "Ben", "text": "I started learning the cello in March.", "timestamp": "2024-05-08T09:00:00Z", "session": "2", "id": "s2-1"},
    {"speaker": "Ana", "text": "How is the cello going? Practising every day?", "timestamp": "2024-05-08T09:01:00Z", "session": "2", "id": "s2-2"},
]


@pytest.mark.parametrize("pipeline", ["rag", "hema", "nemori", "amory", "premem"])
def test_round_trip_through_a_directory(tmp_path: Path, pipeline: str) -> None:
    d = tmp_path / "mem"
    m = dentate.Memory(d, pipeline=pipeline)
    assert m.pipeline.startswith(pipeline)
    report = m.ingest("ana", CONVERSATION)
    closed = m.flush("ana")
    # Pipelines that wait for the end of an episode or a session process the
    # rest when it is flushed.
    assert report["messages"] + closed["messages"] == len(CONVERSATION)
    assert report["items"] + closed["items"] >= 1 and closed["live"] + report["live"] >= 1
    hits = m.search("ana", "what is the name of the cat?", k=3)
    assert 1 <= len(hits) <= 3
    assert any("Miso" in h["text"] for h in hits)
    top = next(h for h in hits if "Miso" in h["text"])
    assert "s1-1" in top["source_refs"] and top["sources"]
    assert top["said_at"] is not None
    # Re-sending the same conversation adds nothing.
    again = m.ingest("ana", CONVERSATION)
    assert again["messages"] == 0
    assert m.message_count("ana") == len(CONVERSATION)
    ctx = m.context("ana", "what is the name of the cat?", 400)
    assert ctx["tokens"] <= 400 and "Miso" in ctx["prompt"]
    packed = m.search("ana", "cello", budget=400)
    assert packed and all(isinstance(h["score"], float) for h in packed)
    assert isinstance(m.show("ana"), str)
    del m
    reopened = dentate.Memory(d, pipeline=pipeline)
    hits2 = reopened.search("ana", "what is the name of the cat?", k=3)
    assert [h["id"] for h in hits2] == [h["id"] for h in hits]


def test_forget_and_correct(tmp_path: Path) -> None:
    m = dentate.Memory(tmp_path / "mem", pipeline="rag", embedder=dentate.Embedder("hash:128"))
    m.ingest("ana", CONVERSATION)
    cat = next(h for h in m.search("ana", "cat Miso", k=5) if "Miso" in h["text"])
    m.correct("ana", cat["id"], "Ana adopted a black dog called Pepper.")
    hits = m.search("ana", "dog Pepper", k=1)
    assert hits[0]["id"] == cat["id"] and "Pepper" in hits[0]["text"]
    assert hits[0]["source_refs"] == cat["source_refs"]
    m.forget("ana", cat["id"])
    assert all(h["id"] != cat["id"] for h in m.search("ana", "dog Pepper", k=10))
    with pytest.raises(dentate.NotFoundError):
        m.forget("ana", cat["id"])
    # Users are separate namespaces.
    assert m.search("bob", "cat", k=3) == []


def test_add_then_process_and_in_memory() -> None:
    m = dentate.Memory(None, pipeline="rag", retriever="bm25")
    ids = m.add("u", CONVERSATION[:2])
    assert len(ids) == 2
    assert m.search("u", "cat", k=2) == []
    report = m.process("u")
    assert report["messages"] == 2
    assert "Miso" in m.search("u", "Miso", k=1)[0]["text"]
