"""The proxy's REST front end: Milvus RESTful API v2 (Milvus 2.4) over a started :class:`InProcessClient`.

Every endpoint is ``POST /v2/vectordb/<group>/<action>`` with a JSON object body whose fields are
camelCase like Milvus's (``collectionName``, ``partitionName``, ``aliasName``). The answer is
always HTTP 200 with ``{"code": 0, "data": ...}`` on success or ``{"code": <Milvus code>,
"message": <reason>}`` on error, as Milvus does. A request refused before any endpoint reads it keeps
its HTTP status, with the same JSON error (code 1100, ``field`` and ``rule`` as below):

- an unknown path: HTTP 404, ``[field=path]``, the path named;
- a wrong method (GET on a POST route): HTTP 405 (``Allow`` header kept), ``[field=method]``,
  naming the allowed method and the path;
- a body larger than the config's ``rest_max_body_bytes`` (default 64 MiB): HTTP 413,
  ``[field=body]``, naming the limit and the setting; refused from its Content-Length before
  anything is read, or (chunked, no Content-Length) once the bytes read pass the limit.

With the config's ``authorization_enabled``, every request (the stream writers' routes and unknown
paths too) needs ``Authorization: Bearer <user>:<password>`` naming a user of the meta (Milvus
RESTful v2's token; checked by the proxy's access control, as the gRPC front end checks
pymilvus's). A missing, malformed or wrong one is refused before anything reads the request, as
Milvus does: HTTP 401 (``WWW-Authenticate: Bearer``) with ``{"code": 1800, "message": "user hasn't
authenticated"}``. Each route then needs its Milvus RPC's privilege (:mod:`frontends.rest.access`,
docs/rbac.md): a refusal is HTTP 403 with code 65535 and Milvus's text. The ``users/``, ``roles/``
and ``privilege_groups/`` routes are :mod:`frontends.rest.routes_rbac`'s.

- Body keys are matched like Go's ``encoding/json`` (Milvus): exact first, else case-insensitively,
  so ``autoID`` and ``autoId`` both work. A key no reader of the endpoint takes is refused (code
  1100 naming its path; a Milvus feature Osprey lacks, such as ``groupingField`` or
  ``params.ttlSeconds``, by name), never accepted and ignored; a value that asks for nothing
  (``null``, ``false``, ``0``, ``""``, ``{}``, ``[]``) is accepted (:func:`refuse_unread`).
- ``collections/create``: the quick setup (``dimension``) creates Milvus's AUTOINDEX on the vector
  field with ``metricType`` (COSINE by default); a ``schema`` create creates its ``indexParams``.
- Bad JSON, a missing or ill-typed field: code 1100 naming the field (``[field=collectionName]``)
  and the rule. Errors of the Osprey rules name REST fields too (``schema.fields[1].dataType``).
- ``asOf`` (Osprey extension) on every read: a TSO timestamp; the meta as it was then, 0 = latest.
- ``dbName`` (every body, as Milvus's): the database the request's collections and aliases live
  in; absent or ``""`` is ``default``. The call runs on a view of the client in that database
  (``in_database``); a database that does not exist is Milvus's code 800, "database not found".
- ``databases/`` (Milvus's): ``create`` (``dbName``, ``properties``: an object of key -> value),
  ``drop``, ``list`` (the names), ``describe`` (``dbName``, ``dbID``, ``properties`` as
  ``[{"key", "value"}]``), ``alter`` (and ``alter_properties``: ``properties`` merged in) and
  ``drop_properties`` (``propertyKeys``); there ``dbName`` is the database acted on.

Osprey extensions beyond Milvus's answers, so the thin client (:mod:`frontends.client`) rebuilds
exactly what :class:`InProcessClient` returns; each is extra, Milvus's own keys are unchanged:

- ``collections/describe`` also has ``virtualChannelNames``, ``physicalChannelNames``,
  ``partitionInfos`` (id and timestamp of each partition) and ``dynamicField`` (the hidden ``$meta``).
- ``collections/show`` and ``partitions/show``: like ``list``, with ids and created timestamps.
- ``collections/create`` takes ``load`` (default true: the collection is created loaded);
  ``collections/describe`` also has ``loadInfo`` (the loaded partitions and the load version);
  ``collections/get_load_state`` also has the vchannels served.
- ``collections/get_flush_state`` (Milvus's GetFlushState, ``segmentIDs``): ``flushed`` and each
  segment's state.
- ``collections/compact`` (Milvus's Compact; ``wait``, default true) and
  ``collections/get_compaction_state`` (Milvus's ``jobID``, or ``compactionID``; ``collectionName``
  optional): Milvus's ``compactionID``, ``state`` (``Executing`` or ``Completed``) and plan counts,
  and beside them ``failedPlanNumber`` and ``mergeInfos`` (each plan's ``sources`` -> ``target``).
- ``collections/describe`` also takes ``collectionID`` (when ``collectionName`` is empty);
  ``collections/get_load_state`` takes Milvus's ``partitionNames`` and also answers
  ``refreshProgress`` (the share of flushed segments the query nodes have loaded).
- ``databases/describe`` also answers ``createdTimestamp``; ``databases/create``, ``alter``,
  ``alter_properties`` and ``drop_properties`` answer ``database`` (the database after the change,
  as ``describe`` words it) beside ``data`` (``{}``, as Milvus's); ``databases/show`` (Osprey's)
  lists every database as ``describe`` words it. ``health/check`` (Osprey's): Milvus's CheckHealth
  (``isHealthy``, ``reasons``, ``quotaStates``) and the live nodes per role.
- Osprey's routes for the calls of :class:`~frontends.api.OspreyAPI` Milvus's REST lacks:
  ``timestamps/now`` (``{"timestamp": <TSO>}``), ``replicas/describe`` (``collectionName`` or
  ``collectionID``: the replicas as their models), ``collections/list_loaded`` (optional
  ``collectionNames``) and ``partitions/list_loaded`` (``collectionName``, optional
  ``partitionNames``): a list of load states as ``collections/get_load_state`` answers them, each
  with its ``collectionName``.
- ``indexes/create`` (Milvus's ``indexParams`` list: ``fieldName``, ``indexName``, ``metricType``,
  ``indexType``, ``params``; each created in order) also takes ``wait`` (default false: answer
  once defined; true: once every flushed segment is indexed) and ``timeout`` (seconds), and
  answers ``indexes`` (each created index's definition) beside ``data`` (``{}``, as Milvus's).
  Every entry's ``params`` is checked before the first is created; a later entry refused by the
  rootcoord leaves the earlier ones created, as in Milvus.
- ``indexes/describe`` also takes ``fieldName``; with neither ``indexName`` nor ``fieldName`` its
  ``data`` lists every index of the collection (Milvus's DescribeIndex with an empty name). Each
  entry has Milvus's keys (``indexName``, ``fieldName``, ``indexType``, ``metricType``,
  ``indexState``, ``indexedRows``, ``totalRows``, ``pendingRows``, ``failReason``) and Osprey's
  (``indexID``, ``collectionID``, ``fieldID``, ``buildType``, ``params``: the build parameters,
  ``createdTimestamp``, ``segments``, ``segmentsIndexed``).
- ``indexes/list`` also takes ``fieldName`` (that field's indexes only); ``indexes/drop`` takes an
  empty ``indexName`` (the collection's only index) or ``fieldName``, and answers ``index`` (the
  dropped definition, null when there was none) beside ``data``.
- ``indexes/wait`` (``collectionName``, ``indexName``, ``timeout``): WaitForIndexBuildingComplete;
  ``data`` as ``indexes/describe`` for that index, once it is Finished.
- ``collections/flush`` (Milvus's Flush; its REST v2 has no such route) seals the collection's
  growing segments, waits until they are flushed, and answers the segments and the flush timestamp.
- ``collections/drop`` answers ``collectionID`` and ``partitions/create|drop`` ``partitionID``
  beside ``data`` (which stays ``{}``, as Milvus's).
- An error whose field the REST request names differently also has ``pythonMessage`` and
  ``pythonField``: message and field as the Python API's keyword names it (``collection_name``,
  not ``collectionName``).
- ``entities/insert`` and ``entities/upsert`` also take ``data`` as an object of columns (field ->
  list of values); ``entities/query`` takes ``id`` (primary keys, as ``entities/get``); search,
  query and get take ``timeout`` (seconds the read may wait for the shards).
- ``entities/delete`` also takes ``ids`` (a list of primary keys, the Python API's keyword) beside
  Milvus's ``filter`` and ``id``; exactly one of ``filter`` and the keys. Its ``data`` has
  ``deleteIds`` (the keys named, or those the filter matched) beside Milvus's ``deleteCount``.
- ``entities/insert``, ``entities/upsert`` and ``entities/delete`` answer ``timestamp`` too: the
  write's TSO timestamp (reads with a ``guaranteeTimestamp`` below it do not see it).

The endpoints are one table, :data:`ENDPOINTS`: InProcessClient method, body arguments, rendering.

The modules, one job each: :mod:`~frontends.rest.parse` reads request bodies,
:mod:`~frontends.rest.render` words results and errors as answers, :mod:`~frontends.rest.endpoint`
says what an endpoint is, ``routes_collections``, ``routes_entities`` and ``routes_indexes`` hold
each group's endpoints, :mod:`~frontends.rest.routes` the whole table, and
:mod:`~frontends.rest.server` the HTTP server (:class:`RestFrontEnd`).
"""

from frontends.rest.parse import Body, PartError, refuse_unread
from frontends.rest.routes import ENDPOINTS
from frontends.rest.server import API_PREFIX, RestFrontEnd

__all__ = ["API_PREFIX", "ENDPOINTS", "Body", "PartError", "RestFrontEnd", "refuse_unread"]
