"""The OpenAI- and Anthropic-compatible gateway: agent programs that speak the OpenAI or Anthropic API play
episodes, their exact tokens go to the lake. `config.py` (the pool's `agent` section), `protocols.py` (the
wire formats behind one seam: `openai_api.py`, `responses_api.py`, `anthropic_api.py`), `segments.py`
(exact ids per segment), `programs.py` (running the user's program), `server.py` (HTTP), `runner.py` (the
rollout service's runner). Nothing here is imported unless a pool configures `agent`."""
