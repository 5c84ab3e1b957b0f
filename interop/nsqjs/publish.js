'use strict';
// Publishes with the real nsqjs Writer (PUB per message, or MPUB batches) and waits for every reply.
// stdout: one {"command","messages","response"} JSON line per acknowledged command.

const common = require('./common');
const { EXIT, emit, exit, fail } = common;

const USAGE = 'node publish.js --nsqd-tcp-address H:P --topic T [--mode pub|mpub] [--batch K] ' +
  '(--body B ... | --bodies-file F | --count N [--prefix P]) [--compression none|snappy|deflate] [--timeout S]';

const args = common.parseArgs({
  'nsqd-tcp-address': { required: true },
  topic: { required: true },
  mode: { default: 'pub' },
  batch: { type: 'int', default: 10 },
  body: { type: 'list', default: [] },
  'bodies-file': {},
  count: { type: 'int', default: 0 },
  prefix: { default: 'msg' },
  compression: { default: 'none' },
  timeout: { type: 'int', default: 30 },
  verbose: { type: 'boolean', default: false },
}, USAGE);

function main() {
  if (!args) return;
  if (![ 'pub', 'mpub' ].includes(args.mode)) return fail(EXIT.ERROR, `--mode must be pub or mpub\nusage: ${USAGE}`);
  common.installLoopbackGuard();
  common.startTimeout(args.timeout);
  const { Writer } = require('nsqjs');
  const messages = common.bodies(args).map(b => Buffer.from(b, 'utf8'));
  const { host, port } = common.splitAddr(args['nsqd-tcp-address']);
  const writer = new Writer(host, port, common.compressionOptions(args.compression));
  let started = false;

  writer.on(Writer.ERROR, err => fail(EXIT.ERROR, 'writer error:', err && err.message));
  writer.on(Writer.CLOSED, () => fail(EXIT.ERROR, 'connection closed by nsqd'));
  writer.on(Writer.READY, () => {
    if (started) return;
    started = true;
    if (!common.checkGranted(writer.conn, args.compression)) return;
    const commands = [];
    if (args.mode === 'pub') {
      for (const m of messages) commands.push([ m ]);
    } else {
      for (let i = 0; i < messages.length; i += args.batch) commands.push(messages.slice(i, i + args.batch));
    }
    let pending = commands.length;
    if (pending === 0) return exit(EXIT.OK);
    for (const group of commands) {
      const name = group.length === 1 ? 'PUB' : 'MPUB';
      // nsqjs sends PUB for a one-element list and MPUB otherwise.
      writer.publish(args.topic, group.length === 1 ? group[0] : group, err => {
        if (err) return fail(EXIT.ERROR, `${name} failed:`, err.message);
        emit({ command: name, messages: group.length, response: 'OK' });
        if (--pending === 0) {
          writer.conn.destroy();
          exit(EXIT.OK);
        }
      });
    }
  });
  writer.connect();
}

main();
