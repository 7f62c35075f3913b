"""``ldpstream dlq replay``: the dead-letter topic back into the reports topics, each ``source`` once."""

from __future__ import annotations

import argparse
import json

from ldpstream.config import ServiceConfig, add_service_arguments


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = subparsers.add_parser(
        "dlq", help="the dead-letter topic: replay what the registry now accepts",
        description="Operations on the dead-letter topic (messages consumers refused, byte for byte, with "
        "reason, detail and source headers).")
    actions = dlq.add_subparsers(dest="action", metavar="ACTION", required=True)
    replay = actions.add_parser(
        "replay", help="send dead letters back to their reports topic, each source once",
        description="Reads the dead-letter topic from its start to its current end. Every message that a "
        "consumer of this registry would now accept (the same validation) is sent back to the reports topic it "
        "came from (its `source` header), with its key, bytes and timestamp; messages that would be refused "
        "again stay dead. Each source is replayed at most once, whatever the replays: a claim per source is "
        "kept in Redis (P:dlq-replayed:<topic>). Run it with the registry the consumers run.")
    add_service_arguments(replay)
    replay.add_argument("--dead-letter-topic", default="ldp-dead-letters")
    replay.add_argument("--reason", action="append", default=None, metavar="REASON",
                        help="replay only dead letters refused with this reason (repeatable; default: any)")
    replay.add_argument("--dry-run", action="store_true", help="count what would be replayed, send nothing")
    replay.add_argument("--retry-pending", action="store_true",
                        help="also send sources whose earlier replay was claimed but never acknowledged (check the "
                        "reports topic's replayed-from headers first)")
    replay.add_argument("--json", action="store_true", help="print one JSON object")
    replay.set_defaults(func=_replay)


def _replay(args: argparse.Namespace) -> int:
    from ldpstream.consumers.dead_letter_replay import pending_sources, replay_dead_letters
    from ldpstream.registry import Registry

    config = ServiceConfig.from_args(args)
    client = config.redis.client()
    result = replay_dead_letters(Registry.load(config.registry), config.kafka, client, config.redis.prefix,
                                 args.dead_letter_topic, reasons=args.reason, dry_run=args.dry_run,
                                 retry_pending=args.retry_pending)
    out = result.to_json()
    if args.json:
        print(json.dumps(out))
        return 0
    verb = "would replay" if args.dry_run else "replayed"
    count = result.would_replay if args.dry_run else result.replayed
    print(f"{args.dead_letter_topic}: read {result.read:,} dead letters; {verb} {count:,}"
          + "".join(f" ({n:,} to {topic})" for topic, n in sorted(result.replayed_to.items())))
    print(f"  already replayed: {result.already_replayed:,}; still refused (stay dead): "
          + (", ".join(f"{reason} {n:,}" for reason, n in sorted(result.still_refused.items())) or "none"))
    if result.unknown_source or result.skipped_reason or result.failed:
        print(f"  left: {result.unknown_source:,} without a known source topic, {result.skipped_reason:,} of other "
              f"reasons; {result.failed:,} sends failed (released for a later replay)")
    if result.pending:
        pending = pending_sources(client, config.redis.prefix, args.dead_letter_topic)
        print(f"  pending: {result.pending:,} claimed by a replay that was never acknowledged "
              f"(e.g. {', '.join(sorted(pending)[:3])}); see --retry-pending")
    return 0
