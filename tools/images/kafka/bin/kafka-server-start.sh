#!/usr/bin/env bash
# kafka-server-start.sh server.properties: the broker in the foreground, logging to the console.
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"
export KAFKA_LOG4J_OPTS="${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/etc/kafka/docker/log4j2.properties}"
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
