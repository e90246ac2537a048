"""Benchmarks behind `lakeflow bench …`: lakeflow side by side with the alternative, as ratios."""
