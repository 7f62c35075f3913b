#!/usr/bin/env bash
# kafka-run-class.sh CLASS ARGS...: a Java class on the image's jars (the distribution's script, reduced).
# KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_OPTS and KAFKA_LOG4J_OPTS as in the distribution.
exec java ${KAFKA_HEAP_OPTS:-} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -Djava.awt.headless=true} \
  ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/etc/kafka/docker/tools-log4j2.properties} ${KAFKA_OPTS:-} \
  -cp '/opt/kafka/libs/*' "$@"
