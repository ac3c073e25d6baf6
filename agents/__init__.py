"""Faust apps and agents: rootcoord (DDL, time tick), and later querynodes and index nodes."""
