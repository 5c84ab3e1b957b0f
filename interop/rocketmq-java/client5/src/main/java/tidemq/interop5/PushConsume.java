package tidemq.interop5;

import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;

/**
 * {@code push-consume}: a PushConsumer of {@code --group} on {@code --topic} whose listener answers FAILURE to
 * every delivery before attempt {@code --succeed-attempt} (1: SUCCESS at once) and SUCCESS after, until
 * {@code --expect} messages succeeded. One {@code consumed} record per delivery (with its result), then
 * {@code done}.
 */
final class PushConsume {
    private PushConsume() {
    }

    static int run(Peer.Options opts) throws Exception {
        String topic = opts.need("topic");
        int expect = opts.integer("expect", 1);
        int succeedAttempt = opts.integer("succeed-attempt", 1);
        CountDownLatch succeeded = new CountDownLatch(expect);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        PushConsumer built;
        try {
            built = provider.newPushConsumerBuilder()
                .setClientConfiguration(Peer.configuration(opts))
                .setConsumerGroup(opts.need("group"))
                .setSubscriptionExpressions(Map.of(topic, Peer.filter(opts)))
                .setConsumptionThreadCount(opts.integer("threads", 4))
                .setMessageListener(view -> {
                    boolean ok = view.getDeliveryAttempt() >= succeedAttempt;
                    Map<String, Object> rec = Peer.view("consumed", view);
                    rec.put("result", ok ? "SUCCESS" : "FAILURE");
                    Peer.emit(rec);
                    if (ok) {
                        succeeded.countDown();
                    }
                    return ok ? ConsumeResult.SUCCESS : ConsumeResult.FAILURE;
                })
                .build();
        } catch (ClientException | RuntimeException e) {
            Peer.emit(Peer.error("start-error", e));
            return 1;
        }
        try (PushConsumer consumer = built) {
            succeeded.await(Long.MAX_VALUE, TimeUnit.MILLISECONDS);
            Thread.sleep(500); // let the last acks reach the proxy before close
        }
        Peer.emit(Peer.record("event", "done", "succeeded", expect));
        return 0;
    }
}
