'use strict';
// What the Node interop harnesses (ali-ons/, nsqjs/) share. Each is its own npm package, so this file
// sits beside them and needs nothing but Node's built-ins.
//
// The contract with the pytest suite:
//   * stdout carries JSON lines only; every log line goes to stderr;
//   * only loopback addresses are ever contacted;
//   * exit codes: 0 success, 1 error, 2 timeout (a harness may add its own above those).

const net = require('net');
const util = require('util');

// Anything that would print to stdout (ours or the client library's) is sent to stderr instead.
for (const m of [ 'log', 'info', 'debug' ]) {
  console[m] = (...args) => console.error(...args);
}

const EXIT = { OK: 0, ERROR: 1, TIMEOUT: 2 };
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

// Parse argv against {name: {type: 'string'|'int'|'boolean'|'list', default, required}}; on error exits 1
// with the usage and returns null.
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
  return out;
}

function isLoopback(host) {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

// Safety net: refuse every TCP connection to a non-loopback host. The clients connect wherever the
// name server or lookupd points them, so a server advertising a LAN address must fail loudly here
// instead of sending traffic off the machine.
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

module.exports = { EXIT, emit, exit, fail, installLoopbackGuard, parseArgs, splitAddr };
