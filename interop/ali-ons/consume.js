#!/usr/bin/env node
'use strict';
// Consume with the ali-ons push Consumer (CLUSTERING) until N distinct bodies were handled.
//
//   node consume.js --namesrv 127.0.0.1:9876 --topic T --group G --count N [--tags EXPR]
//                   [--timeout S] [--fail-first K] [--from first|last|timestamp] [--verbose]
//
// stdout: one JSON line per delivery:
//   {"msgId","topic","tags","keys","body","queueId","queueOffset","reconsumeTimes","failed","properties"}
// "failed" is true for the deliveries the handler rejected on purpose (--fail-first); those are
// not counted. exit: 0 after N distinct bodies (consumer closed), 1 error, 2 timeout.

const common = require('./common');

const USAGE = 'consume.js --namesrv HOST:PORT --topic T --group G --count N [--tags EXPR] ' +
  '[--timeout S] [--fail-first K] [--from first|last|timestamp] [--verbose]';

const FROM = {
  first: 'CONSUME_FROM_FIRST_OFFSET',
  last: 'CONSUME_FROM_LAST_OFFSET',
  timestamp: 'CONSUME_FROM_TIMESTAMP', // ali-ons default consumeTimestamp: now - 30 min
};

const args = common.parseArgs({
  namesrv: { required: true },
  topic: { required: true },
  group: { required: true },
  count: { type: 'int', required: true },
  tags: { default: '*' },
  timeout: { type: 'int', default: 60 },
  'fail-first': { type: 'int', default: 0 },
  from: { default: 'first' },
  verbose: { type: 'boolean', default: false },
}, USAGE);

async function main() {
  if (!FROM[args.from]) throw new Error(`--from must be one of ${Object.keys(FROM).join('|')}`);
  common.installLoopbackGuard();
  const bodies = new Set();
  common.startTimeout(args.timeout, () => `${bodies.size}/${args.count} distinct bodies received`);
  await common.probe(args.namesrv);

  const { Consumer, Producer } = require('ali-ons');
  const consumer = new Consumer(Object.assign(common.clientOptions(args), {
    consumerGroup: args.group,
    consumeFromWhere: FROM[args.from],
  }));
  consumer.on('error', err => console.error('[harness] consumer error:', common.describe(err, args.verbose)));

  let deliveries = 0;
  let finished;
  const done = new Promise(resolve => { finished = resolve; });
  if (args.count === 0) finished();

  consumer.subscribe(args.topic, args.tags, async msg => {
    if (bodies.size >= args.count) {
      // Already done: never ack more messages, so their offsets are not committed on close.
      return new Promise(() => {});
    }
    deliveries++;
    const failed = deliveries <= args['fail-first'];
    const body = msg.body ? msg.body.toString('utf8') : '';
    common.emit({
      msgId: msg.msgId,
      topic: msg.topic,
      tags: msg.tags === undefined ? null : msg.tags,
      keys: msg.keys === undefined ? null : msg.keys,
      body,
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      reconsumeTimes: msg.reconsumeTimes,
      failed,
      properties: msg.properties,
    });
    if (failed) {
      throw new Error(`deliberate failure ${deliveries}/${args['fail-first']} (--fail-first)`);
    }
    bodies.add(body);
    if (bodies.size >= args.count) finished();
  });

  await consumer.ready();
  await done;
  // Let ali-ons record the offset of the last handled message before closing
  // (close() commits offsets with UPDATE_CONSUMER_OFFSET, then sends UNREGISTER_CLIENT).
  await new Promise(resolve => setTimeout(resolve, 200));
  await consumer.close();
  // The internal CLIENT_INNER_PRODUCER (used for retry fallback) runs its own client.
  if (Producer.defaultProducer) await Producer.defaultProducer.close();
}

if (args) {
  main().then(() => common.exit(0), err => common.fail(1, 'consume failed:', common.describe(err, args.verbose)));
}
