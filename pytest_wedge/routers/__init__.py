"""Router kinds: the built-in routers (smg, sglang-router, vllm-router), a command template
and an already running URL; one small adapter per kind, and isolated environments."""
