"""A local ZooKeeper + Kafka for the demo, the benchmarks and the tests: one node of each by
default, or a ZooKeeper ensemble and a replicated Kafka cluster (``LocalCluster(brokers=3,
zookeepers=3)``, Java only) for the tests of node faults.

::

    async with LocalCluster() as cluster:
        consume(cluster.bootstrap, cluster.zookeeper)

Where the cluster comes from, in this order:

1. ``AIO_CLUSTER_BOOTSTRAP`` and ``AIO_CLUSTER_ZOOKEEPER`` (both set, ``use_env=True``): a running
   cluster, e.g. the one of the project's ``docker-compose.yml``; nothing is started.
2. Java 17+ (``$JAVA_HOME/bin/java`` or ``java`` on ``PATH``): Kafka (KRaft, broker and controller
   in one JVM) and ZooKeeper run as two JVMs on 127.0.0.1, their data in a temporary directory
   removed on stop. The jars are fetched once with Maven from ``aio_cluster/jars/pom.xml`` into a
   cache outside the repository (``$AIO_CLUSTER_CACHE`` or ``~/.cache/aio-cluster``), so later
   starts download nothing and start in a few seconds.
3. A Docker engine (and testcontainers installed): the same two servers as containers.

The JVMs never outlive their owner: stopping ends each one's process group (SIGTERM, then SIGKILL),
also when the ``async with`` body is cancelled, and on Linux the kernel kills them should the Python
process itself die (``PR_SET_PDEATHSIG``). For the tests of faults a Java-started cluster can stop
and restart each server (or each node: ``stop_broker(i)``, ``stop_zookeeper_node(i)``) on the
same port with the same data, tell which broker leads a partition, and expire a ZooKeeper session;
`FaultProxy` stands between one client and a server to drop, delay or cut its traffic, and
`KafkaProxies` (``LocalCluster(kafka_proxies=1)``, then ``cluster.kafka_proxies()``) one per
broker between one client and all of Kafka.

Modules::

    __main__.py     ``python -m aio_cluster.local``: the up/down command
    acls.py         a SASL cluster's SCRAM users and ACLs, through Kafka's own tools
    class_archive.py  the JVMs' class-data sharing archives, kept beside the jars
    cli.py          the up/down command (its arguments are aio-cluster local's)
    cluster.py      LocalCluster: the lifecycle and the fault hooks
    config.py       zoo.cfg and server.properties
    docker.py       the Docker fallback (testcontainers)
    env.py          the cluster the environment names
    faults.py       FaultProxy: a TCP proxy that drops, delays or cuts one client's traffic;
                    KafkaProxies: one per broker, for all of one client's Kafka traffic
    jars.py         the Maven fetch of the jars, and its cache
    probes.py       free ports, readiness, a partition's leader
    process.py      child processes, the JVM command line
    proxy_sets.py   ProxySets: the Kafka listeners for proxies, lent one set at a time
    security.py     the TLS certificates and SCRAM user of a secured cluster
    servers.py      the JVMs of every node, each stoppable and restartable (the fault hooks)

For people there is a command line (also installed as ``aio-cluster-local``)::

    $ python -m aio_cluster.local up        # prints two lines once the cluster is ready:
    export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:40123
    export AIO_CLUSTER_ZOOKEEPER=127.0.0.1:40125
    $ python -m aio_cluster.local down      # from another shell; or Ctrl-C / SIGTERM to ``up``

Paste the two lines into another shell to point the tests and the demo at that cluster. POSIX
only.
"""

from .acls import AclResources as AclResources
from .cli import main as main
from .cluster import LocalCluster as LocalCluster
from .cluster import Mode as Mode
from .faults import FaultProxy as FaultProxy
from .faults import KafkaProxies as KafkaProxies

__all__ = ["AclResources", "FaultProxy", "KafkaProxies", "LocalCluster", "Mode", "main"]
