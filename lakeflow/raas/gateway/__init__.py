"""The OpenAI-compatible gateway: agent programs that speak the OpenAI API play episodes, their exact tokens
go to the lake. `config.py` (the pool's `agent` section), `openai_api.py` (wire formats), `segments.py`
(exact ids per segment), `programs.py` (running the user's program), `server.py` (HTTP), `runner.py`
(the rollout service's runner). Nothing here is imported unless a pool configures `agent`."""
