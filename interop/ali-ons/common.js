'use strict';
// Helpers for produce.js / consume.js (tidemq <-> ali-ons interop harness), on top of ../harness.js.
//
// Contract with the pytest suite:
//   * stdout carries JSON lines only; every log line (ours and ali-ons') goes to stderr;
//   * only loopback addresses are ever contacted (name server and brokers);
//   * exit codes: 0 success, 1 error (bad args, connection failure, client error), 2 timeout.

const net = require('net');
const util = require('util');
const harness = require('../harness');

const { fail, splitAddr } = harness;

// Fail fast with a clear message when nothing listens at the name server address
// (ali-ons itself would only log and retry every 30 s).
function probe(addr, timeoutMs = 3000) {
  const { host, port } = splitAddr(addr);
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port });
    const done = err => {
      sock.destroy();
      if (err) reject(new Error(`cannot connect to name server ${addr}: ${err.code || err.message}`));
      else resolve();
    };
    sock.setTimeout(timeoutMs, () => done(new Error(`timeout after ${timeoutMs} ms`)));
    sock.once('connect', () => done());
    sock.once('error', done);
  });
}

// Logger handed to ali-ons (it calls logger.info/warn/error with util.format arguments).
function makeLogger(verbose) {
  const line = tag => (...args) => console.error(`[ali-ons ${tag}]`, util.format(...args));
  return {
    debug() {},
    info: verbose ? line('INFO') : () => {},
    warn: line('WARN'),
    error: line('ERROR'),
  };
}

// Options common to Producer and Consumer. ali-ons asserts an `httpclient` even when
// `nameSrv` is set; it is only used to fetch the name-server list from the Aliyun
// address server, which `nameSrv` bypasses, so a stub that always throws is enough.
// No accessKey/secretKey: without both, ali-ons does not sign requests.
function clientOptions(args) {
  splitAddr(args.namesrv);
  return {
    nameSrv: args.namesrv,
    httpclient: {
      request() {
        throw new Error('[harness] HTTP name-server lookup is disabled');
      },
    },
    logger: makeLogger(args.verbose),
  };
}

// One-line description of an error (stack only with --verbose).
function describe(err, verbose) {
  if (!(err instanceof Error)) return String(err);
  if (verbose) return err.stack;
  return `${err.name}: ${err.message}` + (err.code !== undefined ? ` (code ${err.code})` : '');
}

function startTimeout(seconds, what) {
  const t = setTimeout(() => fail(2, `timeout after ${seconds} s: ${what()}`), seconds * 1000);
  return t;
}

process.on('unhandledRejection', err => {
  console.error('[harness] unhandled rejection:', err);
});

module.exports = { ...harness, describe, probe, clientOptions, startTimeout };
