"""Typer command-line interface. Command modules import torch inside their functions only."""
