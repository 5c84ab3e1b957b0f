'use strict';
// Shared helpers for publish.js / consume.js (tidemq <-> nsqjs interop harness).
//
// Same contract as tests/interop/pynsq_client.py:
//   * stdout carries JSON lines only; every log line goes to stderr;
//   * only loopback addresses are ever contacted;
//   * exit codes: 0 success, 1 error, 2 timeout, 3 compression requested but not granted.

const fs = require('fs');
const net = require('net');
const util = require('util');

for (const m of [ 'log', 'info', 'debug' ]) {
  console[m] = (...args) => console.error(...args);
}

const EXIT = { OK: 0, ERROR: 1, TIMEOUT: 2, NOT_GRANTED: 3 };
let exiting = false;

// Exit once stdout has been flushed (it is a pipe when driven by pytest).
function exit(code) {
  if (exiting) return;
  exiting = true;
  process.stdout.write('', () => process.exit(code));
}

function emit(obj) {
  if (!exiting) process.stdout.write(JSON.stringify(obj) + '\n');
}

function fail(code, ...args) {
  console.error('[harness]', util.format(...args));
  exit(code);
}

// Parse argv against {name: {type: 'string'|'int'|'boolean'|'list', default, required}}.
function parseArgs(spec, usage) {
  const options = {};
  for (const [ name, s ] of Object.entries(spec)) {
    options[name] = { type: s.type === 'boolean' ? 'boolean' : 'string', multiple: s.type === 'list' };
  }
  let values;
  try {
    ({ values } = util.parseArgs({ options, strict: true, allowPositionals: false }));
  } catch (err) {
    fail(EXIT.ERROR, `${err.message}\nusage: ${usage}`);
    return null;
  }
  const out = {};
  for (const [ name, s ] of Object.entries(spec)) {
    let v = values[name];
    if (v === undefined) {
      if (s.required) {
        fail(EXIT.ERROR, `missing --${name}\nusage: ${usage}`);
        return null;
      }
      v = s.default;
    } else if (s.type === 'int') {
      if (!/^\d+$/.test(v)) {
        fail(EXIT.ERROR, `--${name} must be a non-negative integer, got ${JSON.stringify(v)}`);
        return null;
      }
      v = Number(v);
    }
    out[name] = v;
  }
  if (![ 'none', 'snappy', 'deflate' ].includes(out.compression)) {
    fail(EXIT.ERROR, `--compression must be none, snappy or deflate\nusage: ${usage}`);
    return null;
  }
  return out;
}

function isLoopback(host) {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

// nsqjs connects wherever lookupd points it; refuse anything that is not loopback.
function installLoopbackGuard() {
  const connect = net.connect;
  const guarded = function(...args) {
    const opts = typeof args[0] === 'object' && args[0] !== null ? args[0] : { port: args[0], host: args[1] };
    const host = opts.host || 'localhost';
    if (!opts.path && !isLoopback(host)) {
      const err = new Error(`[harness] refusing to connect to non-loopback address ${host}:${opts.port}`);
      console.error(err.message);
      throw err;
    }
    return connect.apply(this, args);
  };
  net.connect = guarded;
  net.createConnection = guarded;
}

function splitAddr(addr) {
  const m = /^([^:]+):(\d+)$/.exec(addr || '');
  if (!m) throw new Error(`bad address ${JSON.stringify(addr)}, expected HOST:PORT`);
  return { host: m[1], port: Number(m[2]) };
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
  EXIT,
  bodies,
  checkGranted,
  compressionOptions,
  emit,
  exit,
  fail,
  installLoopbackGuard,
  parseArgs,
  splitAddr,
  startTimeout,
};
