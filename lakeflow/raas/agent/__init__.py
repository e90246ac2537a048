"""Multi-turn, tool-using episodes: the environment interface users implement, and the runner that plays it."""
