#!/usr/bin/env bash
exec /opt/kafka/bin/kafka-run-class.sh org.apache.kafka.tools.ConsoleProducer "$@"
