'use strict';
// Consumes with the real nsqjs Reader, FINs every message, and exits once N have arrived and their
// FINs have left the socket. stdout: one {"body","attempts","id"} JSON line per message.

const common = require('./common');
const { EXIT, emit, exit, fail } = common;

const USAGE = 'node consume.js (--nsqd-tcp-address H:P | --lookupd-http-address H:P) --topic T --channel C ' +
  '--count N [--max-in-flight M] [--compression none|snappy|deflate] [--timeout S]';

const args = common.parseArgs({
  'nsqd-tcp-address': {},
  'lookupd-http-address': {},
  topic: { required: true },
  channel: { required: true },
  count: { type: 'int', required: true },
  'max-in-flight': { type: 'int', default: 1 },
  compression: { default: 'none' },
  timeout: { type: 'int', default: 30 },
  verbose: { type: 'boolean', default: false },
}, USAGE);

function connections(reader) {
  return reader.readerRdy.connections.map(r => r.conn);
}

function flushed(conn) {
  const socket = conn.conn;
  if (!socket || socket.destroyed) return true;
  const d = conn.deflater;
  return socket.writableLength === 0 && (!d || (d.writableLength === 0 && d.readableLength === 0));
}

function main() {
  if (!args) return;
  if (!args['nsqd-tcp-address'] === !args['lookupd-http-address']) {
    return fail(EXIT.ERROR, `give exactly one of --nsqd-tcp-address and --lookupd-http-address\nusage: ${USAGE}`);
  }
  if (args.count <= 0) return fail(EXIT.ERROR, '--count must be > 0');
  common.installLoopbackGuard();
  common.startTimeout(args.timeout);
  const { Reader } = require('nsqjs');
  const options = {
    maxInFlight: args['max-in-flight'],
    ...common.compressionOptions(args.compression),
    ...(args['nsqd-tcp-address']
      ? { nsqdTCPAddresses: [ args['nsqd-tcp-address'] ] }
      : { lookupdHTTPAddresses: [ args['lookupd-http-address'] ], lookupdPollInterval: 1 }),
  };
  const reader = new Reader(args.topic, args.channel, options);
  let received = 0;
  let closing = false;
  let checked = false;

  reader.on(Reader.ERROR, err => fail(EXIT.ERROR, 'reader error:', err && err.message));
  reader.on(Reader.NSQD_CLOSED, () => {
    if (!closing) fail(EXIT.ERROR, 'connection closed by nsqd');
  });
  reader.on(Reader.MESSAGE, msg => {
    if (closing) return;
    if (!checked) {
      checked = true;
      const conns = connections(reader);
      if (!conns.length) return fail(EXIT.ERROR, 'a message arrived on no known connection');
      if (!conns.every(c => common.checkGranted(c, args.compression))) return;
    }
    emit({ body: msg.body.toString('utf8'), attempts: msg.attempts, id: msg.id });
    msg.finish();
    if (++received < args.count) return;
    closing = true;
    const conns = connections(reader);
    const started = Date.now();
    const wait = setInterval(() => {
      if (!conns.every(flushed) && Date.now() - started < 5000) return;
      clearInterval(wait);
      reader.close();
      setTimeout(() => exit(EXIT.OK), 100);
    }, 10);
  });
  reader.connect();
}

main();
