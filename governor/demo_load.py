"""The demo workload of ``governor up --load``: document translation beside chat.

``--chats`` clients keep a chat stream decoding at all times (closed loop), while long documents
(``--doc-words`` words each) arrive as a Poisson process at ``--doc-rate`` per second. Each
document's prefill competes with the chats' decode steps — the situation in which the default
token budget lets inter-token latency breach its SLO and the controller earns its keep.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Sequence

import aiohttp

from governor.common.cli import EnvArgumentParser, positive_int
from governor.contracts.endpoints import INFERENCE, LOCAL_HOST

WORDS = (
    "the", "committee", "will", "review", "annual", "report", "and", "publish", "its", "findings",
    "next", "week", "while", "translators", "prepare", "every", "chapter", "in", "three",
    "languages",
)


def document(words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def _stream(session: aiohttp.ClientSession, url: str, model: str, text: str,
                  max_tokens: int) -> None:
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "system", "content": "Translate into French."},
                         {"role": "user", "content": text}]}
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            async for _ in response.content:
                pass
    except aiohttp.ClientError:
        await asyncio.sleep(1)  # the service restarting: try again shortly


async def _model(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(f"{url}/v1/models") as response:
        payload = await response.json()
    return str(payload["data"][0]["id"])


async def drive(url: str, chats: int, doc_rate: float, doc_words: int, seed: int) -> None:
    rng = random.Random(seed)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        model = await _model(session, url)

        async def chat() -> None:
            while True:
                await _stream(session, url, model, document(40, rng), rng.randint(200, 600))

        async def documents() -> None:
            pending: set[asyncio.Task[None]] = set()
            while True:
                await asyncio.sleep(rng.expovariate(doc_rate))
                task = asyncio.create_task(
                    _stream(session, url, model, document(doc_words, rng), 64))
                pending.add(task)
                task.add_done_callback(pending.discard)

        await asyncio.gather(documents(), *(chat() for _ in range(chats)))


def main(argv: Sequence[str] | None = None) -> int:
    p = EnvArgumentParser(prog="governor.demo_load", description=__doc__)
    p.add_argument("--url", default=INFERENCE.url(LOCAL_HOST),
                   help="the inference service; several, comma-separated, each get the load")
    p.add_argument("--chats", type=positive_int, default=32, help="concurrent chat streams")
    p.add_argument("--doc-rate", type=float, default=1.5, help="documents per second")
    p.add_argument("--doc-words", type=positive_int, default=5000, help="words per document")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    urls = [url.strip() for url in args.url.split(",") if url.strip()]
    asyncio.run(drive_all(urls, args.chats, args.doc_rate, args.doc_words, args.seed))
    return 0


async def drive_all(urls: Sequence[str], chats: int, doc_rate: float, doc_words: int,
                    seed: int) -> None:
    """The same load on every replica, each with its own random stream."""
    await asyncio.gather(*(drive(url, chats, doc_rate, doc_words, seed + i)
                           for i, url in enumerate(urls)))


if __name__ == "__main__":
    raise SystemExit(main())
