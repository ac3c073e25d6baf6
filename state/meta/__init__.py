"""Meta held in Redis (Milvus keeps it in etcd): every class takes its Redis client and the cluster
namespace, and every key it creates starts with ``"<namespace>:"``.

May import: ``streams``, ``schemas``.
"""
