"""The pieces of `benchmarks/fix_quality.py`: run `fix` on a copy, compare each changed file with its
original, and count what a strict reviewer would reject. The pure analyses (`changes`, `idioms`, `guards`,
`statements`, `linelimit`) are apart from the parts that run programs (`runner`, `lint`), so the tests can
feed them hand-written before/after pairs."""
