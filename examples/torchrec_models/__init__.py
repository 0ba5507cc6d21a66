"""Every model torchrec ships that takes `(dense_features, KeyedJaggedTensor)` and an EmbeddingBagCollection,
as a factory the harness calls (`model=custom model.factory=examples.torchrec_models.<module>:build`).

Each `build` takes the harness's `embedding_bag_collection=` and `dense_in_features=` plus the model's own
sizes as keyword arguments (`model.kwargs`), with small defaults that train in seconds on the synthetic
workload. docs/custom-model.md walks through them.
"""
