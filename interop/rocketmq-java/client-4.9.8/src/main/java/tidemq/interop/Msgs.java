package tidemq.interop;

import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/** What the tests compare of a message, as the Java client sees it. */
final class Msgs {
    private Msgs() {
    }

    /** The body of message {@code index}: the prefix and index, padded with '.' to {@code size} bytes. */
    static Message build(Peer.Options opts, String topic, int index) {
        String body = opts.get("body-prefix", "java-") + index;
        int size = opts.integer("body-size", 0);
        StringBuilder padded = new StringBuilder(body);
        while (padded.length() < size) {
            padded.append('.');
        }
        Message msg = new Message(topic, opts.get("tag", "TagA"), padded.toString().getBytes());
        msg.setKeys(opts.get("key-prefix", "jk-") + index);
        msg.putUserProperty("idx", Integer.toString(index));
        // --props k=v,k=v (repeatable): message i carries the (i mod n)-th set as user properties.
        java.util.List<String> sets = opts.all("props");
        if (!sets.isEmpty()) {
            for (String pair : sets.get(index % sets.size()).split(",")) {
                String[] kv = pair.split("=", 2);
                if (kv.length != 2) {
                    throw new IllegalArgumentException("--props wants k=v pairs, not " + pair);
                }
                msg.putUserProperty(kv[0], kv[1]);
            }
        }
        return msg;
    }

    static Map<String, Object> received(String event, MessageExt msg) {
        Map<String, Object> rec = Peer.record("event", event);
        rec.put("topic", msg.getTopic());
        String body = Peer.text(msg.getBody());
        rec.put("body", body == null ? null : body.replaceAll("\\.+$", ""));
        rec.put("bodyLen", msg.getBody() == null ? -1 : msg.getBody().length);
        rec.put("tags", msg.getTags());
        rec.put("keys", msg.getKeys());
        rec.put("msgId", msg.getMsgId());
        rec.put("offsetMsgId", msg instanceof MessageClientExt ? ((MessageClientExt) msg).getOffsetMsgId() : null);
        rec.put("brokerName", msg.getBrokerName());
        rec.put("queueId", msg.getQueueId());
        rec.put("queueOffset", msg.getQueueOffset());
        rec.put("commitLogOffset", msg.getCommitLogOffset());
        rec.put("reconsumeTimes", msg.getReconsumeTimes());
        rec.put("bornTimestamp", msg.getBornTimestamp());
        rec.put("storeTimestamp", msg.getStoreTimestamp());
        rec.put("storeHost", String.valueOf(msg.getStoreHost()));
        rec.put("sysFlag", msg.getSysFlag());
        Map<String, String> props = new TreeMap<>(msg.getProperties());
        props.remove(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
        rec.put("properties", props);
        return rec;
    }

    static Map<String, Object> sent(String mode, int index, Message msg, SendResult r) {
        Map<String, Object> rec = Peer.record("event", "sent", "mode", mode, "index", index);
        rec.put("body", Peer.text(msg.getBody()).replaceAll("\\.+$", ""));
        rec.put("keys", msg.getKeys());
        if (r != null) {
            rec.put("status", r.getSendStatus().name());
            rec.put("msgId", r.getMsgId());
            rec.put("offsetMsgId", r.getOffsetMsgId());
            rec.put("brokerName", r.getMessageQueue().getBrokerName());
            rec.put("queueId", r.getMessageQueue().getQueueId());
            rec.put("queueOffset", r.getQueueOffset());
            rec.put("regionId", r.getRegionId());
        }
        return rec;
    }

    static Map<String, Object> failure(String event, Throwable e) {
        Map<String, Object> rec = Peer.record("event", event, "error", String.valueOf(e));
        rec.put("code", Peer.responseCode(e));
        rec.put("remark", Peer.responseRemark(e));
        return rec;
    }
}
