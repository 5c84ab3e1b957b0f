package tidemq.interop5;

import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * Apache RocketMQ's official 5.x Java SDK (the gRPC client of the proxy) driven from pytest: one sub-command
 * per role (produce, simple-consume, push-consume), options as {@code --name value}, one JSON object per line
 * on stdout for the test to assert on; the SDK's own logging goes to stderr or under {@code user.home}.
 * Exits 2 when {@code --timeout} seconds pass first, so a hung peer fails its test instead of the suite.
 */
public final class Peer {
    private static PrintStream json;
    private static final Pattern RESPONSE_CODE = Pattern.compile("response-code=(\\d+)");

    private Peer() {
    }

    public static void main(String[] argv) throws Exception {
        json = System.out;
        System.setOut(System.err); // anything a library prints stays off the JSON channel
        if (argv.length == 0) {
            usage("a sub-command is required: produce, simple-consume or push-consume");
        }
        Options opts;
        try {
            opts = Options.parse(Arrays.copyOfRange(argv, 1, argv.length));
        } catch (IllegalArgumentException e) {
            usage(e.getMessage());
            return;
        }
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
                case "simple-consume":
                    rc = SimpleConsume.run(opts);
                    break;
                case "push-consume":
                    rc = PushConsume.run(opts);
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
        // The SDK's non-daemon threads can outlive close(); the answer is out, so leave now.
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
        String line = Json.encode(rec);
        synchronized (Peer.class) {
            json.println(line);
            json.flush();
        }
    }

    /** An error record: the SDK puts the proxy's {@code apache.rocketmq.v2.Code} in the message as response-code. */
    static Map<String, Object> error(String event, Throwable e) {
        Throwable cause = e;
        while (!(cause instanceof ClientException) && cause.getCause() != null) {
            cause = cause.getCause();
        }
        String message = String.valueOf(cause.getMessage());
        Matcher m = RESPONSE_CODE.matcher(message);
        Integer code = m.find() ? Integer.valueOf(m.group(1)) : null;
        return record("event", event, "exception", cause.getClass().getSimpleName(), "code", code, "message", message);
    }

    static ClientConfiguration configuration(Options opts) {
        var builder = ClientConfiguration.newBuilder()
            .setEndpoints(opts.need("endpoint"))
            .enableSsl(Boolean.parseBoolean(opts.get("tls", "false")))
            .setRequestTimeout(Duration.ofSeconds(opts.integer("request-timeout", 10)));
        String accessKey = opts.get("access-key", null);
        if (accessKey != null) {
            builder.setCredentialProvider(new StaticSessionCredentialsProvider(accessKey, opts.need("secret-key")));
        }
        return builder.build();
    }

    /** {@code --selector tag|sql} with {@code --expression}. */
    static FilterExpression filter(Options opts) {
        String expression = opts.get("expression", "*");
        switch (opts.get("selector", "tag")) {
            case "tag":
                return new FilterExpression(expression, FilterExpressionType.TAG);
            case "sql":
                return new FilterExpression(expression, FilterExpressionType.SQL92);
            default:
                throw new IllegalArgumentException("--selector must be tag or sql");
        }
    }

    /** What a test asserts on about a received message. */
    static Map<String, Object> view(String event, MessageView v) {
        ByteBuffer body = v.getBody().duplicate();
        byte[] bytes = new byte[body.remaining()];
        body.get(bytes);
        Map<String, Object> rec = record(
            "event", event,
            "id", v.getMessageId().toString(),
            "topic", v.getTopic(),
            "body", new String(bytes, StandardCharsets.UTF_8),
            "tag", v.getTag().orElse(null),
            "keys", new ArrayList<>(v.getKeys()),
            "group", v.getMessageGroup().orElse(null),
            "delivery_timestamp", v.getDeliveryTimestamp().orElse(null),
            "born_timestamp", v.getBornTimestamp(),
            "attempt", v.getDeliveryAttempt(),
            "received_ms", System.currentTimeMillis());
        rec.put("properties", new java.util.TreeMap<>(v.getProperties()));
        return rec;
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

        List<String> all(String name) {
            return values.getOrDefault(name, List.of());
        }
    }
}
