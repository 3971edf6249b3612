"""One vLLM engine in a process of its own, driven over a pipe.

The demo and the tests run a reference engine, a prefill and a decode on
one machine. Each is an offline ``vllm.LLM`` in its own process (vLLM keeps
its KV connector in a process global, so two engines cannot share one),
with vLLM's engine core in that process too, so that the driver can ask
what vLLM's block pool holds and the test can kill an engine outright.

The model is the tiny Llama whose config ships in ``models/tiny-llama``,
with weights drawn by :func:`make_model` from a fixed seed (Hugging Face's
own initialisation, whose outputs depend on the context; vLLM's dummy
weights are so small that zeroing the KV cache changes no token), greedy
decoding and prompts given as token ids: nothing is downloaded.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, cast

CONFIG = os.path.join(os.path.dirname(__file__), "models", "tiny-llama")


def make_model(directory: str, seed: int = 0) -> str:
    """The tiny Llama with seeded random weights, saved in directory
    (made once; the same bytes for the same seed)."""
    if not os.path.exists(os.path.join(directory, "model.safetensors")):
        import torch
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(CONFIG)
        torch.manual_seed(seed)
        transformers.LlamaForCausalLM(cfg).save_pretrained(  # type: ignore[no-untyped-call]
            directory, safe_serialization=True
        )
    return directory


@dataclass
class Output:
    """One request's result: its tokens, why it ended, and what it hands on."""

    tokens: list[int]
    finish_reason: str | None
    kv_transfer_params: dict[str, Any] | None


@dataclass
class EngineSpec:
    """What an engine process runs: the KV transfer config (None: none)
    and vLLM settings."""

    name: str
    model: str
    kv_transfer_config: dict[str, Any] | None = None
    kv_cache_bytes: int = 16 << 20
    env: dict[str, str] = field(default_factory=dict)
    # Tensor-parallel ranks: more than 1 runs vLLM's worker processes, one
    # per rank, each bound to one core (VLLM_CPU_OMP_THREADS_BIND).
    tp: int = 1


def _main(conn: Connection, spec: EngineSpec) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if spec.tp > 1:
        cores = os.cpu_count() or 1
        os.environ.setdefault(
            "VLLM_CPU_OMP_THREADS_BIND", "|".join(str(r % cores) for r in range(spec.tp))
        )
    os.environ.update(spec.env)
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    kv = KVTransferConfig(**spec.kv_transfer_config) if spec.kv_transfer_config else None
    llm = LLM(
        model=spec.model,
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=256,
        enforce_eager=True,
        seed=0,
        max_num_seqs=8,
        kv_cache_memory_bytes=spec.kv_cache_bytes,
        kv_transfer_config=kv,
        disable_log_stats=True,
        tensor_parallel_size=spec.tp,
        distributed_executor_backend="mp" if spec.tp > 1 else None,
    )
    client: Any = llm.llm_engine.engine_core
    core = client.engine_core  # in process: VLLM_ENABLE_V1_MULTIPROCESSING=0
    pool = core.scheduler.kv_cache_manager.block_pool
    conn.send(("ready", None))
    while True:
        cmd, arg = conn.recv()
        if cmd == "generate":
            prompts, max_tokens, params = arg
            sp = [
                SamplingParams(
                    temperature=0,
                    max_tokens=max_tokens,
                    ignore_eos=True,
                    detokenize=False,
                    extra_args={"kv_transfer_params": p} if p is not None else None,
                )
                for p in params
            ]
            outs = llm.generate(
                [TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False
            )
            conn.send(
                (
                    "ok",
                    [
                        Output(
                            list(o.outputs[0].token_ids),
                            o.outputs[0].finish_reason,
                            o.kv_transfer_params,
                        )
                        for o in outs
                    ],
                )
            )
        elif cmd == "settle":
            # Step until no finished request waits for its connector (a
            # prefill's blocks wait for the decode's read), or the deadline.
            deadline = time.monotonic() + arg
            while core.scheduler.has_requests() and time.monotonic() < deadline:
                llm.llm_engine.step()
                time.sleep(0.005)  # the hosts' reports come from other processes
            conn.send(("ok", core.scheduler.has_requests()))
        elif cmd == "blocks":
            # Free blocks against usable ones (block 0 is vLLM's null block).
            conn.send(("ok", (pool.get_num_free_blocks(), pool.num_gpu_blocks - 1)))
        elif cmd == "scribble":
            # Overwrite blocks of the KV cache in place, as a bug that
            # reused them would (the demo's negative control).
            from vllm.distributed.kv_transfer import get_kv_transfer_group

            w = cast(Any, get_kv_transfer_group()).worker
            layout, buf = w.layout, w.regions.files[0][1]
            for cb in layout.to_custody(arg):
                buf[cb * layout.block_bytes : (cb + 1) * layout.block_bytes] = 0
            conn.send(("ok", None))
        elif cmd == "stop":
            llm.llm_engine.engine_core.shutdown()
            conn.send(("ok", None))
            return


class Engine:
    """The driver's handle on an engine process."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_main, args=(child, spec), name=f"vllm-{spec.name}", daemon=spec.tp == 1
        )
        self.proc.start()
        child.close()

    def _call(self, cmd: str, arg: Any = None, timeout_s: float = 600) -> Any:
        self._conn.send((cmd, arg))
        return self._answer(cmd, timeout_s)

    def _answer(self, cmd: str, timeout_s: float) -> Any:
        if not self._conn.poll(timeout_s):
            raise TimeoutError(f"engine {self.spec.name}: no answer to {cmd} within {timeout_s} s")
        try:
            _, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(
                f"engine {self.spec.name} exited (code {self.proc.exitcode}) during {cmd}"
            ) from None
        return value

    def wait_ready(self, timeout_s: float = 600) -> None:
        """Block until vLLM is up in the engine process."""
        self._answer("start", timeout_s)

    def generate(
        self,
        prompts: list[list[int]],
        max_tokens: int,
        params: list[dict[str, Any] | None] | None = None,
        timeout_s: float = 600,
    ) -> list[Output]:
        """Greedy outputs of prompts, with kv_transfer_params per prompt;
        TimeoutError when the engine has not answered within timeout_s."""
        result: list[Output] = self._call(
            "generate", (prompts, max_tokens, params or [None] * len(prompts)), timeout_s=timeout_s
        )
        return result

    def settle(self, timeout_s: float) -> bool:
        """Step until no request waits for the connector; False once none does."""
        waiting: bool = self._call("settle", timeout_s, timeout_s=timeout_s + 60)
        return waiting

    def blocks(self) -> tuple[int, int]:
        """(free, usable) blocks of vLLM's block pool."""
        free, usable = self._call("blocks")
        return int(free), int(usable)

    def scribble(self, blocks: list[int]) -> None:
        """Zero vLLM blocks of the engine's KV cache (a connector engine)."""
        self._call("scribble", blocks)

    def stop(self) -> None:
        """Shut vLLM down and end the process."""
        if self.proc.is_alive():
            try:
                self._call("stop", timeout_s=60)
            except (RuntimeError, TimeoutError, BrokenPipeError, OSError):
                pass
            self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()

    def kill(self) -> None:
        """SIGKILL the engine process."""
        self.proc.kill()
        self.proc.join()
