package tidemq.interop5;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * {@code simple-consume}: a SimpleConsumer of {@code --group} on {@code --topic} receives batches of
 * {@code --batch} with {@code --invisible-seconds} (long polls of {@code --await-seconds}) until {@code --expect}
 * messages were acked or {@code --polls} receives came back (0: no limit). {@code --ack-attempt N} acks a message
 * only from its N-th delivery on (1: at once), so earlier deliveries come back after their invisible time: the
 * SDK's way to nack; with {@code --change-invisible-seconds S} such a delivery's invisible duration is changed to S
 * seconds ({@code changed} record), so it comes back after S. One {@code received}, {@code acked}/{@code not-acked} record per message, a
 * {@code receive-error}/{@code ack-error} per failure, then {@code done}.
 */
final class SimpleConsume {
    private SimpleConsume() {
    }

    static int run(Peer.Options opts) throws Exception {
        String topic = opts.need("topic");
        int expect = opts.integer("expect", 1);
        int polls = opts.integer("polls", 0);
        int batch = opts.integer("batch", 16);
        int ackAttempt = opts.integer("ack-attempt", 1);
        Duration invisible = Duration.ofSeconds(opts.integer("invisible-seconds", 30));
        int changeInvisible = opts.integer("change-invisible-seconds", 0);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        int acked = 0;
        int done = 0;
        SimpleConsumer built;
        try {
            built = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(Peer.configuration(opts))
                .setConsumerGroup(opts.need("group"))
                .setAwaitDuration(Duration.ofSeconds(opts.integer("await-seconds", 5)))
                .setSubscriptionExpressions(Map.of(topic, Peer.filter(opts)))
                .build();
        } catch (ClientException | RuntimeException e) {
            Peer.emit(Peer.error("start-error", e));
            return 1;
        }
        try (SimpleConsumer consumer = built) {
            while (acked < expect && (polls == 0 || done < polls)) {
                done++;
                List<MessageView> views;
                try {
                    views = consumer.receive(batch, invisible);
                } catch (ClientException e) {
                    Peer.emit(Peer.error("receive-error", e));
                    continue;
                }
                for (MessageView v : views) {
                    Peer.emit(Peer.view("received", v));
                    if (v.getDeliveryAttempt() < ackAttempt) {
                        if (changeInvisible > 0) {
                            try {
                                consumer.changeInvisibleDuration(v, Duration.ofSeconds(changeInvisible));
                                Peer.emit(Peer.record("event", "changed", "id", v.getMessageId().toString(),
                                    "changed_ms", System.currentTimeMillis()));
                            } catch (ClientException e) {
                                Peer.emit(Peer.error("change-error", e));
                            }
                        }
                        Peer.emit(Peer.record("event", "not-acked", "id", v.getMessageId().toString()));
                        continue;
                    }
                    try {
                        consumer.ack(v);
                        acked++;
                        Peer.emit(Peer.record("event", "acked", "id", v.getMessageId().toString()));
                    } catch (ClientException e) {
                        Peer.emit(Peer.error("ack-error", e));
                    }
                }
            }
        }
        Peer.emit(Peer.record("event", "done", "acked", acked, "polls", done));
        return 0;
    }
}
