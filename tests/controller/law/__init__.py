"""Tests of the controller's pure decision law."""
