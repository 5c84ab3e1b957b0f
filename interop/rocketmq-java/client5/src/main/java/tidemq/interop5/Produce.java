package tidemq.interop5;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * {@code produce}: {@code --count} messages of {@code --type normal|fifo|delay|transaction} to {@code --topic},
 * bodies {@code <body-prefix><i>}, tag {@code --tag}, key {@code <body-prefix><i>}; FIFO messages cycle over
 * {@code --groups} message groups ({@code g0, g1, ...}), delay messages carry a delivery timestamp
 * {@code --delay-ms} from the send; transactions end with {@code --resolution commit|rollback|none} and, for
 * none, the producer stays up {@code --linger} seconds answering the proxy's checks with {@code --check}.
 * One {@code sent} (or {@code send-error}) record per message, then {@code done}.
 */
final class Produce {
    private Produce() {
    }

    static int run(Peer.Options opts) throws Exception {
        String topic = opts.need("topic");
        String type = opts.get("type", "normal");
        int count = opts.integer("count", 1);
        String prefix = opts.get("body-prefix", "m");
        String tag = opts.get("tag", null);
        int groups = opts.integer("groups", 1);
        long delayMs = opts.integer("delay-ms", 0);
        int bodySize = opts.integer("body-size", 0);
        TransactionResolution check = TransactionResolution.valueOf(opts.get("check", "COMMIT").toUpperCase());
        int expectChecks = opts.integer("expect-checks", 0);
        CountDownLatch checks = new CountDownLatch(expectChecks);

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ProducerBuilder builder = provider.newProducerBuilder()
            .setClientConfiguration(Peer.configuration(opts))
            .setTopics(topic);
        if (type.equals("transaction")) {
            builder.setTransactionChecker(view -> {
                Peer.emit(Peer.view("checked", view));
                checks.countDown();
                return check;
            });
        }
        int failures = 0;
        Producer built;
        try {
            built = builder.build();
        } catch (ClientException | RuntimeException e) {
            Peer.emit(Peer.error("start-error", e));
            return 1;
        }
        try (Producer producer = built) {
            for (int i = 0; i < count; i++) {
                String body = prefix + i;
                byte[] bytes = bodySize > 0 ? new byte[bodySize] : body.getBytes(StandardCharsets.UTF_8);
                MessageBuilder mb = provider.newMessageBuilder().setTopic(topic).setKeys(body).setBody(bytes);
                for (String property : opts.all("property")) {
                    String[] kv = property.split("=", 2);
                    mb.addProperty(kv[0], kv.length > 1 ? kv[1] : "");
                }
                if (tag != null) {
                    mb.setTag(tag);
                }
                String group = null;
                Long deliverAt = null;
                if (type.equals("fifo")) {
                    group = "g" + (i % groups);
                    mb.setMessageGroup(group);
                } else if (type.equals("delay")) {
                    deliverAt = System.currentTimeMillis() + delayMs;
                    mb.setDeliveryTimestamp(deliverAt);
                }
                Message message = mb.build();
                try {
                    SendReceipt receipt;
                    if (type.equals("transaction")) {
                        Transaction tx = producer.beginTransaction();
                        receipt = producer.send(message, tx);
                        String resolution = opts.get("resolution", "commit");
                        if (resolution.equals("commit")) {
                            tx.commit();
                        } else if (resolution.equals("rollback")) {
                            tx.rollback();
                        }
                    } else {
                        receipt = producer.send(message);
                    }
                    Peer.emit(Peer.record("event", "sent", "index", i, "id", receipt.getMessageId().toString(),
                        "body", body, "group", group, "delivery_timestamp", deliverAt,
                        "sent_ms", System.currentTimeMillis()));
                } catch (ClientException | RuntimeException e) {
                    failures++;
                    Map<String, Object> rec = Peer.error("send-error", e);
                    rec.put("index", i);
                    Peer.emit(rec);
                }
            }
            if (expectChecks > 0) {
                checks.await(opts.integer("linger", 60), TimeUnit.SECONDS);
            }
        }
        Peer.emit(Peer.record("event", "done", "failures", failures));
        return 0;
    }
}
