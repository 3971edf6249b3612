"""custody: the engine API client (custody.client) and the vLLM connector (custody.vllm)."""
