#!/usr/bin/env node
'use strict';
// Send N messages synchronously with the ali-ons Producer; one JSON line per ack on stdout.
//
//   node produce.js --namesrv 127.0.0.1:9876 --topic T --count N [--group PG] [--tags TAG]
//                   [--keys-prefix K] [--body-prefix B] [--timeout S] [--verbose]
//
// stdout: {"i":0,"msgId":"...","queueId":1,"queueOffset":0,"status":"SEND_OK"} per message.
// exit: 0 all sent and producer closed, 1 error, 2 overall timeout.

const common = require('./common');

const USAGE = 'produce.js --namesrv HOST:PORT --topic T --count N [--group PG] [--tags TAG] ' +
  '[--keys-prefix K] [--body-prefix B] [--timeout S] [--verbose]';

const args = common.parseArgs({
  namesrv: { required: true },
  topic: { required: true },
  count: { type: 'int', required: true },
  group: { default: 'tidemq_interop_producer' },
  tags: {},
  'keys-prefix': {},
  'body-prefix': { default: 'msg-' },
  timeout: { type: 'int', default: 60 },
  verbose: { type: 'boolean', default: false },
}, USAGE);

async function main() {
  common.installLoopbackGuard();
  let sent = 0;
  common.startTimeout(args.timeout, () => `${sent}/${args.count} messages acknowledged`);
  await common.probe(args.namesrv);

  const { Producer, Message } = require('ali-ons');
  const producer = new Producer(Object.assign(common.clientOptions(args), {
    producerGroup: args.group,
  }));
  producer.on('error', err => console.error('[harness] producer error:', common.describe(err, args.verbose)));
  await producer.ready();

  for (let i = 0; i < args.count; i++) {
    const body = `${args['body-prefix']}${i}`;
    // Two-argument form = no tag (ali-ons then sends the property TAGS=null, see NOTES.md).
    const msg = args.tags === undefined ? new Message(args.topic, body) : new Message(args.topic, args.tags, body);
    if (args['keys-prefix'] !== undefined) {
      msg.keys = [ `${args['keys-prefix']}${i}` ];
    }
    const r = await producer.send(msg);
    sent++;
    common.emit({
      i,
      msgId: r.msgId,
      queueId: Number(r.messageQueue.queueId),
      queueOffset: r.queueOffset,
      status: r.sendStatus,
    });
  }

  await producer.close();
  // ali-ons also starts an internal CLIENT_INNER_PRODUCER (a second client); close it too.
  if (Producer.defaultProducer) await Producer.defaultProducer.close();
}

if (args) {
  main().then(() => common.exit(0), err => common.fail(1, 'produce failed:', common.describe(err, args.verbose)));
}
