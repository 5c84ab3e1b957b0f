package tidemq.interop;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Request-reply. {@code request --topic T --count N --request-timeout-ms M}: DefaultMQProducer.request of
 * bodies {@code ask-0..ask-N-1} (bodies of {@code --pad} bytes more are compressed), one "reply" record each
 * (with the request's correlation id), or a "request-timeout" record. {@code reply --topic T --group G
 * --expect N}: a push consumer from the first offset answering each request with
 * MessageUtil.createReplyMessage ({@code re:<body>}) sent by a DefaultMQProducer; one "replied" record each.
 */
final class Request {
    private Request() {
    }

    static int request(Peer.Options opts) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(opts.get("group", "JavaRequesterPG"));
        producer.setNamesrvAddr(opts.need("namesrv"));
        producer.start();
        String pad = ".".repeat(opts.integer("pad", 0));
        long timeoutMs = opts.integer("request-timeout-ms", 10000);
        for (int i = 0; i < opts.integer("count", 1); i++) {
            Message msg = new Message(opts.need("topic"), ("ask-" + i + pad).getBytes(StandardCharsets.UTF_8));
            try {
                // The reply is the MessageExt the client built from the broker's push.
                MessageExt reply = (MessageExt) producer.request(msg, timeoutMs);
                java.util.Map<String, Object> rec = Msgs.received("reply", reply);
                rec.put("requestCorrelationId", msg.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
                Peer.emit(rec);
            } catch (RequestTimeoutException e) {
                Peer.emit(Peer.record("event", "request-timeout", "message", e.getMessage()));
            }
        }
        producer.shutdown();
        return 0;
    }

    static int reply(Peer.Options opts, long timeoutMs) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(opts.get("producer-group", "JavaReplierPG"));
        producer.setNamesrvAddr(opts.need("namesrv"));
        producer.start();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(opts.need("group"));
        consumer.setNamesrvAddr(opts.need("namesrv"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(opts.need("topic"), "*");
        AtomicInteger replied = new AtomicInteger();
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                java.util.Map<String, Object> rec = Msgs.received("replied", m);
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("re:" + Peer.text(m.getBody())).getBytes(StandardCharsets.UTF_8));
                    SendResult result = producer.send(reply);
                    rec.put("sendStatus", String.valueOf(result.getSendStatus()));
                    rec.put("replyTopic", reply.getTopic());
                } catch (Exception e) {
                    rec.put("error", String.valueOf(e));
                    rec.put("code", Peer.responseCode(e));
                }
                Peer.emit(rec);
                synchronized (replied) {
                    replied.incrementAndGet();
                    replied.notifyAll();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        Peer.emit(Peer.record("event", "started"));
        int expect = opts.integer("expect", 1);
        long deadline = System.currentTimeMillis() + timeoutMs;
        synchronized (replied) {
            while (replied.get() < expect && System.currentTimeMillis() < deadline) {
                replied.wait(200);
            }
        }
        consumer.shutdown();
        producer.shutdown();
        return 0;
    }
}
