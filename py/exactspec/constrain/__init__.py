"""JSON mode: schema-constrained answers (see schema.py for the subset, grammar.py for the whitespace policy,
engine.py for masks, drafter.py for grammar-forced drafting).

    spec = parse_response_format({"type": "json_schema", "schema": {...}})      # SchemaError before generation
    c = Constraint(Grammar(spec), TokenVocab.from_tokenizer(tokenizer, vocab_size))
"""
from .engine import NO, Constraint
from .grammar import Grammar
from .schema import SchemaError, parse_response_format, parse_schema
from .vocab import TokenVocab

__all__ = ["Constraint", "Grammar", "NO", "SchemaError", "TokenVocab", "parse_response_format", "parse_schema"]
