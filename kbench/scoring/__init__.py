"""Scoring: metrics of rankings and tuning predictions, the Evaluator, prediction files and typed result records."""
