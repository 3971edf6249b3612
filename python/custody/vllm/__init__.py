"""custody.vllm: CustodyConnector, custody as a KV transfer backend of vLLM.

``kv_connector_module_path: custody.vllm`` and ``kv_connector:
CustodyConnector`` in vLLM's ``--kv-transfer-config``.
"""

from custody.vllm.connector import CustodyConnector

__all__ = ["CustodyConnector"]
