package tidemq.interop;

import com.alibaba.fastjson.JSON;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Apache RocketMQ's own 4.9.8 Java client driven from pytest: one sub-command per role (produce, consume,
 * litepull, admin, request, reply, transact), options as {@code --name value}, one JSON object per line on stdout for the test to
 * assert on. Everything else (the client's own logging) goes to stderr or to the log root the test gives.
 * Exits 2 when {@code --timeout} seconds pass first, so a hung peer fails its test instead of the suite.
 * Every client signs its requests with AclClientRPCHook when given {@code --access-key} and {@code --secret-key}.
 */
public final class Peer {
    private static PrintStream json;

    private Peer() {
    }

    public static void main(String[] argv) throws Exception {
        json = System.out;
        System.setOut(System.err); // anything a library prints stays off the JSON channel
        if (argv.length == 0) {
            usage("a sub-command is required: produce, consume, litepull, admin, request, reply or transact");
        }
        Options opts = Options.parse(Arrays.copyOfRange(argv, 1, argv.length));
        long timeoutMs = (long) (Double.parseDouble(opts.get("timeout", "60")) * 1000);
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(timeoutMs);
            } catch (InterruptedException e) {
                return;
            }
            emit(record("event", "timeout"));
            Runtime.getRuntime().halt(2);
        }, "peer-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        int rc;
        try {
            switch (argv[0]) {
                case "produce":
                    rc = Produce.run(opts);
                    break;
                case "consume":
                    rc = Consume.run(opts, timeoutMs);
                    break;
                case "litepull":
                    rc = LitePull.run(opts, timeoutMs);
                    break;
                case "admin":
                    rc = Admin.run(opts);
                    break;
                case "request":
                    rc = Request.request(opts);
                    break;
                case "reply":
                    rc = Request.reply(opts, timeoutMs);
                    break;
                case "transact":
                    rc = Transact.run(opts);
                    break;
                default:
                    usage("unknown sub-command " + argv[0]);
                    return;
            }
        } catch (IllegalArgumentException e) {
            usage(e.getMessage());
            return;
        }
        json.flush();
        // The client's non-daemon threads can outlive shutdown(); the answer is out, so leave now.
        Runtime.getRuntime().halt(rc);
    }

    static void usage(String message) {
        System.err.println("peer: " + message);
        Runtime.getRuntime().halt(2);
    }

    static Map<String, Object> record(Object... pairs) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            out.put((String) pairs[i], pairs[i + 1]);
        }
        return out;
    }

    static void emit(Map<String, Object> rec) {
        String line = JSON.toJSONString(rec);
        synchronized (Peer.class) {
            json.println(line);
            json.flush();
        }
    }

    static String text(byte[] body) {
        return body == null ? null : new String(body, StandardCharsets.UTF_8);
    }

    /** Command-line options: {@code --name value} pairs; a repeated name keeps every value in order. */
    static final class Options {
        private final Map<String, List<String>> values = new HashMap<>();

        static Options parse(String[] args) {
            Options opts = new Options();
            for (int i = 0; i < args.length; i++) {
                if (!args[i].startsWith("--") || i + 1 >= args.length) {
                    throw new IllegalArgumentException("expected --name value at " + args[i]);
                }
                opts.values.computeIfAbsent(args[i].substring(2), k -> new ArrayList<>()).add(args[i + 1]);
                i++;
            }
            return opts;
        }

        String get(String name, String fallback) {
            List<String> v = values.get(name);
            return v == null ? fallback : v.get(v.size() - 1);
        }

        String need(String name) {
            String v = get(name, null);
            if (v == null) {
                throw new IllegalArgumentException("--" + name + " is required");
            }
            return v;
        }

        int integer(String name, int fallback) {
            String v = get(name, null);
            try {
                return v == null ? fallback : Integer.parseInt(v);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("--" + name + " must be an integer, not " + v);
            }
        }

        void set(String name, String value) {
            values.put(name, new ArrayList<>(List.of(value)));
        }

        List<String> all(String name) {
            return values.getOrDefault(name, List.of());
        }
    }

    /** The plain ACL's signing hook from {@code --access-key}/{@code --secret-key}, or null to send unsigned. */
    static org.apache.rocketmq.remoting.RPCHook rpcHook(Options opts) {
        String accessKey = opts.get("access-key", null);
        if (accessKey == null) {
            return null;
        }
        return new org.apache.rocketmq.acl.common.AclClientRPCHook(
            new org.apache.rocketmq.acl.common.SessionCredentials(accessKey, opts.need("secret-key")));
    }

    /** {@code --selector tag|sql} with {@code --expression}: MessageSelector.byTag or bySql. */
    static org.apache.rocketmq.client.consumer.MessageSelector selector(Options opts) {
        String expression = opts.get("expression", "*");
        switch (opts.get("selector", "tag")) {
            case "tag":
                return org.apache.rocketmq.client.consumer.MessageSelector.byTag(expression);
            case "sql":
                return org.apache.rocketmq.client.consumer.MessageSelector.bySql(expression);
            default:
                throw new IllegalArgumentException("--selector must be tag or sql");
        }
    }

    /** The broker's remark behind a client exception (the innermost one that carries a code), or null. */
    static String responseRemark(Throwable e) {
        String remark = null;
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof org.apache.rocketmq.client.exception.MQClientException
                && ((org.apache.rocketmq.client.exception.MQClientException) t).getResponseCode() != -1) {
                remark = ((org.apache.rocketmq.client.exception.MQClientException) t).getErrorMessage();
            }
            if (t instanceof org.apache.rocketmq.client.exception.MQBrokerException) {
                remark = ((org.apache.rocketmq.client.exception.MQBrokerException) t).getErrorMessage();
            }
        }
        return remark;
    }

    /** The remoting response code behind a client exception, or null when it carries none. */
    static Integer responseCode(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof org.apache.rocketmq.client.exception.MQClientException) {
                int code = ((org.apache.rocketmq.client.exception.MQClientException) t).getResponseCode();
                if (code != -1) {
                    return code;
                }
            }
            if (t instanceof org.apache.rocketmq.client.exception.MQBrokerException) {
                return ((org.apache.rocketmq.client.exception.MQBrokerException) t).getResponseCode();
            }
        }
        return null;
    }

    /** Sorted so that two runs print the same thing. */
    static <K extends Comparable<K>, V> Map<K, V> sorted(Map<K, V> map) {
        return map == null ? null : new TreeMap<>(map);
    }

    static List<String> sortedList(Collection<String> items) {
        List<String> out = new ArrayList<>(items);
        out.sort(null);
        return out;
    }
}
