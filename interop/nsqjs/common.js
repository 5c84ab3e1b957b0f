'use strict';
// Helpers for publish.js / consume.js (tidemq <-> nsqjs interop harness), on top of ../harness.js.
//
// Same contract as tests/interop/pynsq_client.py:
//   * stdout carries JSON lines only; every log line goes to stderr;
//   * only loopback addresses are ever contacted;
//   * exit codes: 0 success, 1 error, 2 timeout, 3 compression requested but not granted.

const fs = require('fs');
const harness = require('../harness');

const { fail } = harness;
const EXIT = { ...harness.EXIT, NOT_GRANTED: 3 };

// The shared parser, plus the --compression check both scripts need.
function parseArgs(spec, usage) {
  const out = harness.parseArgs(spec, usage);
  if (out && ![ 'none', 'snappy', 'deflate' ].includes(out.compression)) {
    fail(EXIT.ERROR, `--compression must be none, snappy or deflate\nusage: ${usage}`);
    return null;
  }
  return out;
}

// nsqjs options asking for the requested stream compression.
function compressionOptions(compression) {
  return { snappy: compression === 'snappy', deflate: compression === 'deflate' };
}

// The IDENTIFY reply an nsqjs connection got; fails the run if the compression was not granted.
function checkGranted(conn, compression) {
  const reply = (conn && conn.statemachine && conn.statemachine.identifyResponse) || {};
  console.error('[harness] IDENTIFY response', JSON.stringify(reply));
  if (compression !== 'none' && reply[compression] !== true) {
    fail(EXIT.NOT_GRANTED, `nsqd did not grant ${compression}: ${JSON.stringify(reply)}`);
    return false;
  }
  return true;
}

function bodies(args) {
  if (args['bodies-file']) {
    return JSON.parse(fs.readFileSync(args['bodies-file'], 'utf8'));
  }
  if (args.body && args.body.length) return args.body;
  return Array.from({ length: args.count }, (_, i) => `${args.prefix}-${i}`);
}

function startTimeout(seconds) {
  const t = setTimeout(() => fail(EXIT.TIMEOUT, `timed out after ${seconds}s`), seconds * 1000);
  t.unref();
}

module.exports = {
  ...harness,
  EXIT,
  bodies,
  checkGranted,
  compressionOptions,
  parseArgs,
  startTimeout,
};
