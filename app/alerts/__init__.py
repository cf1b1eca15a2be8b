"""Alert formatting and sending: messages, the webhook/Slack/SMTP senders and the policy that
decides which addresses a webhook may reach. Pure: no database; callers pass plain values."""
