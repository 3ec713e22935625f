"""Reads a results table and reports Oracle intervals, accuracy, cost and the theory curve."""
